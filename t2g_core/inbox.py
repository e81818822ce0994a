"""Taking a file out of an inbox folder anyone may drop files into: regular files only, size-capped, streamed.

An inbox is written by others, so a name in it may be a symlink to a private file or to ``/dev/zero``, a FIFO that
blocks whoever opens it, a device, or a file of any size. :func:`land` takes a file only when it is a regular file
(checked with ``lstat`` before opening, opened with ``O_NOFOLLOW | O_NONBLOCK``, and checked again on the open
descriptor, so it cannot be swapped in between), at most ``max_bytes`` long; it copies it in 1 MiB chunks while
hashing it (never the whole file in memory) into a hidden temporary, with the source's permission bits (a private
0600 file stays private; 0600 when the source has none, e.g. an object store), then renames it into place under its
content hash. What it refuses raises :class:`Refused` with the reason.
"""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20
PRIVATE = 0o600
KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


class Refused(ValueError):
    """A file the inbox does not take (not a regular file, or larger than the cap); the message says why."""


@dataclass(frozen=True)
class Landed:
    sha256: str
    path: Path  # the copy, named by content
    size: int


def _kind(mode: int) -> str:
    return KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path: str | Path, max_bytes: int) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` and its status, or :class:`Refused` when it is not a regular file of at
    most ``max_bytes`` (nothing is opened for a symlink, FIFO or device)."""
    before = os.lstat(path)
    if not stat.S_ISREG(before.st_mode):
        raise Refused(f"{path}: {_kind(before.st_mode)}, not a regular file; not taken")
    if before.st_size > max_bytes:
        raise Refused(f"{path}: {before.st_size} bytes, larger than the inbox's cap of {max_bytes} bytes; not taken")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    after = os.fstat(fd)
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise Refused(f"{path}: replaced while it was being opened; not taken")
    return fd, after


def _descriptor_chunks(fd: int) -> Iterator[bytes]:
    while block := os.read(fd, CHUNK):
        yield block


def copy_hashed(chunks: Iterable[bytes], folder: Path, suffix: str, mode: int, max_bytes: int, name: str) -> Landed:
    """Stream ``chunks`` into ``folder/<sha256[:32]><suffix>`` (a temporary, then a rename), hashing as it goes;
    :class:`Refused` when they add up to more than ``max_bytes`` (``name`` names the source in the message)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".incoming.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    digest, size = hashlib.sha256(), 0
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE)
    try:
        for block in chunks:
            size += len(block)
            if size > max_bytes:
                raise Refused(f"{name}: larger than the inbox's cap of {max_bytes} bytes; not taken")
            digest.update(block)
            os.write(out, block)
        os.fchmod(out, mode)
        os.fsync(out)
        os.close(out)
        out = -1
        final = folder / f"{digest.hexdigest()[:32]}{suffix}"
        if final.exists():
            tmp.unlink()
        else:
            os.replace(tmp, final)
        return Landed(digest.hexdigest(), final, size)
    finally:
        if out >= 0:
            os.close(out)
        tmp.unlink(missing_ok=True)


def chunks_digest(chunks: Iterable[bytes], max_bytes: int, name: str) -> str:
    """sha256 of streamed ``chunks``; :class:`Refused` past ``max_bytes``."""
    digest, size = hashlib.sha256(), 0
    for block in chunks:
        size += len(block)
        if size > max_bytes:
            raise Refused(f"{name}: larger than the inbox's cap of {max_bytes} bytes; not taken")
        digest.update(block)
    return digest.hexdigest()


def file_digest(path: str | Path, max_bytes: int) -> str:
    """sha256 of the regular file ``path`` (streamed; :class:`Refused` for anything else or past the cap)."""
    fd, _ = open_regular(path, max_bytes)
    try:
        return chunks_digest(_descriptor_chunks(fd), max_bytes, str(path))
    finally:
        os.close(fd)


def land(path: str | Path, folder: Path, max_bytes: int) -> Landed:
    """Copy the regular file ``path`` into ``folder`` under its content hash, keeping its permission bits."""
    fd, st = open_regular(path, max_bytes)
    try:
        return copy_hashed(
            _descriptor_chunks(fd), folder, Path(path).suffix, stat.S_IMODE(st.st_mode) & 0o777, max_bytes, str(path)
        )
    finally:
        os.close(fd)


def inbox_names(root: str | Path, skip_dirs: tuple[str, ...] = ()) -> Iterator[Path]:
    """Every name under ``root`` (symlinked folders are not followed), hidden names and ``skip_dirs`` left out."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in skip_dirs)
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(folder) / name
