"""The feedback inbox: files anyone may drop in, taken into the workspace once each, and the ledgers that say so.

An inbox is written by others, so a name in it may be a symlink to a private file or to ``/dev/zero``, a FIFO that
blocks whoever opens it, a device, or a file of any size. A local file is taken only when it is a regular file
(checked with ``lstat`` before opening, opened with ``O_NOFOLLOW | O_NONBLOCK``, and checked again on the open
descriptor, so it cannot be swapped in between: :func:`open_regular`), at most ``max_bytes`` long; it is copied in
1 MiB chunks while hashing it (never the whole file in memory) into a hidden temporary, with the source's permission
bits (a private 0600 file stays private; 0600 when the source has none, e.g. an object store), then renamed into place
under its content hash. What is refused raises :class:`Refused` with the reason.

The workspace's inbox keeps two ledgers, each written under its one-writer lock: ``.seen.json`` (content hash -> the
name it came in as: :func:`scan` takes a file once, into ``.landed/``) and ``.processed.json`` (landed name -> the
feedback version it became: :func:`pending_files` are the others, :func:`mark_processed` adds one).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from t2g_core.config import WorkspaceConfig
from t2g_core.locks import folder_lock
from t2g_core.store import read_json, write_text_atomic
from t2g_core.workspace import Workspace

CHUNK = 1 << 20
FEEDBACK_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
LANDED_DIR, SEEN_FILE, PROCESSED_FILE = ".landed", ".seen.json", ".processed.json"
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


def inbox_names(root: str | Path, skip_dirs: tuple[str, ...] = ()) -> Iterator[Path]:
    """Every name under ``root`` (symlinked folders are not followed), hidden names and ``skip_dirs`` left out."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in skip_dirs)
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(folder) / name


# --------------------------------------------------------------------------------------------- the workspace's inbox
def _inbox(workspace: WorkspaceConfig) -> Path:
    return Workspace.at(workspace.root).inbox


def _ledger(path: Path) -> dict[str, str]:
    return read_json(path) if path.exists() else {}


@contextlib.contextmanager
def _editing(ledger: Path) -> Iterator[dict[str, str]]:
    """The ledger's entries, written back when the block ends, under its one-writer lock: two scans (or two runs
    marking files) take turns."""
    with folder_lock(ledger, f"the feedback inbox (pid {os.getpid()})", wait_s=120):
        entries = _ledger(ledger)
        yield entries
        write_text_atomic(ledger, json.dumps(entries, indent=2, sort_keys=True))


def scan(inbox: str, workspace: WorkspaceConfig, warn: Callable[[str], None]) -> list[dict]:
    """Take every new feedback file in ``inbox`` (a folder or an fsspec URL) into the workspace.

    Returns ``[{"sha256", "path" (immutable local copy), "source"}]`` for files whose content was never seen; the
    seen-ledger ``<workspace>/inbox/.seen.json`` (content hash -> original path) has it, so renaming or re-sending a
    file does not take it twice. A file that is not a regular file, or is larger than ``workspace.inbox_max_mb``, is
    left where it is and ``warn`` hears why.
    """
    folder = _inbox(workspace)
    max_bytes = int(workspace.inbox_max_mb * (1 << 20))
    new: list[dict] = []
    with _editing(folder / SEEN_FILE) as seen:
        for name, source in _sources(inbox):
            try:
                sha = source.digest(max_bytes)
                if sha in seen:
                    continue
                landed = source.land(folder / LANDED_DIR, max_bytes)
            except Refused as exc:
                warn(str(exc))
                continue
            seen[landed.sha256] = name
            new.append({"sha256": landed.sha256, "path": str(landed.path), "source": name})
    return new


class LocalSource:
    """A name in a local inbox folder, read only when it is a regular file (:func:`open_regular`): hashed, or copied
    under its content hash with its permission bits."""

    def __init__(self, path: Path):
        self.path = path

    def digest(self, max_bytes: int) -> str:
        fd, _ = open_regular(self.path, max_bytes)
        try:
            return chunks_digest(_descriptor_chunks(fd), max_bytes, str(self.path))
        finally:
            os.close(fd)

    def land(self, folder: Path, max_bytes: int) -> Landed:
        fd, st = open_regular(self.path, max_bytes)
        try:
            mode = stat.S_IMODE(st.st_mode) & 0o777
            return copy_hashed(_descriptor_chunks(fd), folder, self.path.suffix, mode, max_bytes, str(self.path))
        finally:
            os.close(fd)


class RemoteSource:
    """A file of an fsspec file system (an object store): streamed; its copy is private (0600)."""

    def __init__(self, fs, name: str):
        self.fs, self.name = fs, name

    def _chunks(self, max_bytes: int) -> Iterator[bytes]:
        size = self.fs.size(self.name)
        if size is not None and size > max_bytes:
            raise Refused(f"{self.name}: {size} bytes, larger than the inbox's cap of {max_bytes} bytes; not taken")
        with self.fs.open(self.name, "rb") as f:
            while block := f.read(CHUNK):
                yield block

    def digest(self, max_bytes: int) -> str:
        return chunks_digest(self._chunks(max_bytes), max_bytes, self.name)

    def land(self, folder: Path, max_bytes: int) -> Landed:
        return copy_hashed(self._chunks(max_bytes), folder, Path(self.name).suffix, PRIVATE, max_bytes, self.name)


def _sources(inbox: str) -> Iterator[tuple[str, LocalSource | RemoteSource]]:
    """The feedback files of ``inbox`` (a local folder, walked without following symlinked folders, or a URL)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(inbox)
    local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
    names = (str(p) for p in inbox_names(root, skip_dirs=(LANDED_DIR,))) if local else sorted(fs.find(root))
    for name in names:
        if Path(name).name.startswith(".") or f"/{LANDED_DIR}/" in name or not name.endswith(FEEDBACK_SUFFIXES):
            continue
        yield name, LocalSource(Path(name)) if local else RemoteSource(fs, name)


def pending_files(workspace: WorkspaceConfig) -> list[str]:
    """Landed inbox files not yet appended to the feedback dataset, oldest first."""
    folder = _inbox(workspace)
    done = _ledger(folder / PROCESSED_FILE)
    files = [p for p in (folder / LANDED_DIR).glob("*") if p.is_file() and not p.name.startswith(".")]
    return [str(p) for p in sorted(files, key=lambda p: p.stat().st_mtime) if p.name not in done]


def mark_processed(path: str, version: int, workspace: WorkspaceConfig) -> None:
    with _editing(_inbox(workspace) / PROCESSED_FILE) as ledger:
        ledger[Path(path).name] = f"feedback version {version}"
