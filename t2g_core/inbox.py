"""The feedback inbox: files anyone may drop in, taken into the workspace once each, and the ledgers that say so.

An inbox is written by others, so a name in it may be a symlink, a FIFO, a device, or a file of any size. A local
file is taken only when it is a regular file (``lstat`` before opening, ``O_NOFOLLOW | O_NONBLOCK``, checked again on
the descriptor: :func:`open_regular`) of at most ``max_bytes``; it is copied in chunks while hashing into a hidden
temporary with the source's permission bits (0600 when it has none), then renamed under its content hash. What is
refused raises :class:`Refused` with the reason.

State lives in ``<workspace>/artifacts/inbox/``, a folder no one drops files into: ``landed/`` copies and two
ledgers, each under its one-writer lock: ``seen.json`` (content hash -> name: :func:`scan` takes a file once) and
``processed.json`` (landed name -> feedback version or ``rejected: <reason>``; :func:`pending_files` are the others).
A ledger is read only from this user's own regular file (:func:`open_own`). An earlier workspace's hidden ledgers in
the drop folder are taken over once, read the same way. The drop folder is sticky (:meth:`Workspace.at`).
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
from t2g_core.feedback import load_feedback
from t2g_core.locks import folder_lock
from t2g_core.store import BrokenFile, write_text_atomic
from t2g_core.workspace import Workspace

CHUNK = 1 << 20
FEEDBACK_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
LANDED_DIR, SEEN_FILE, PROCESSED_FILE = "landed", "seen.json", "processed.json"  # in artifacts/inbox (once: .<name>)
LEDGER_MAX_BYTES = 64 << 20
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


def open_regular(path: str | Path, max_bytes: int, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` (in the folder ``dir_fd`` when given) and its status, or :class:`Refused`
    when it is not a regular file of at most ``max_bytes`` (nothing is opened for a symlink, FIFO or device)."""
    before = os.lstat(path, dir_fd=dir_fd)
    if not stat.S_ISREG(before.st_mode):
        raise Refused(f"{path}: {_kind(before.st_mode)}, not a regular file; not taken")
    if before.st_size > max_bytes:
        raise Refused(f"{path}: {before.st_size} bytes, larger than the inbox's cap of {max_bytes} bytes; not taken")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    after = os.fstat(fd)
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise Refused(f"{path}: replaced while it was being opened; not taken")
    return fd, after


def open_own(path: str | Path, max_bytes: int, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """:func:`open_regular` for a file only this user should have written: :class:`Refused` as well when another
    user owns it or it has a second name (a hard link to a file kept elsewhere)."""
    fd, st = open_regular(path, max_bytes, dir_fd)
    if st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        raise Refused(f"{path}: owned by uid {st.st_uid}, {st.st_nlink} name(s): not this user's own file; not read")
    return fd, st


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


def inbox_names(root: str | Path) -> Iterator[Path]:
    """Every name under ``root`` (symlinked folders are not followed), hidden names left out."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(folder) / name


# --------------------------------------------------------------------------------------------- the workspace's inbox
def _state(workspace: WorkspaceConfig, warn: Callable[[str], None]) -> Path:
    """``<workspace>/artifacts/inbox``, made on first use with what an earlier version kept in the drop folder
    (:func:`_take_over`), in a temporary renamed into place: it is there whole or not at all."""
    ws = Workspace.at(workspace.root)
    state = ws.artifacts / "inbox"
    if state.is_dir():
        return state
    with folder_lock(state, f"the feedback inbox (pid {os.getpid()})", wait_s=120):
        if not state.is_dir():
            staging = state.with_name(f".inbox.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            staging.mkdir()
            _take_over(ws.inbox, staging, int(workspace.inbox_max_mb * (1 << 20)), warn)
            staging.rename(state)
    return state


def _read_ledger(path: Path) -> dict[str, str]:
    """A ledger's entries ({} when there is none yet), read only from this user's own regular file
    (:func:`open_own`): never through a symlink, from a FIFO that would block the reader, or from a planted file."""
    try:
        fd, _ = open_own(path, LEDGER_MAX_BYTES)
    except FileNotFoundError:
        return {}
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    try:
        return json.loads(data)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise BrokenFile(f"{path}: not valid JSON ({exc})") from None


def _write_ledger(path: Path, entries: dict[str, str]) -> None:
    write_text_atomic(path, json.dumps(entries, indent=2, sort_keys=True))


@contextlib.contextmanager
def _editing(ledger: Path) -> Iterator[dict[str, str]]:
    """The ledger's entries, written back when the block ends, under its one-writer lock: two scans (or two runs
    marking files) take turns."""
    with folder_lock(ledger, f"the feedback inbox (pid {os.getpid()})", wait_s=120):
        entries = _read_ledger(ledger)
        yield entries
        _write_ledger(ledger, entries)


def _take_over(drop: Path, state: Path, max_bytes: int, warn: Callable[[str], None]) -> None:
    """Copy an earlier version's ``.seen.json``, ``.processed.json`` and ``.landed/`` from the drop folder into
    ``state``: only this user's own regular files, the folder opened without following a symlink (anyone who may drop a
    file may have planted those names); what is refused stays and ``warn`` hears why."""
    for name in (SEEN_FILE, PROCESSED_FILE):
        try:
            entries = _read_ledger(drop / f".{name}")
        except (OSError, ValueError) as exc:
            warn(f"{exc} (an earlier inbox ledger, not taken over)")
            continue
        _write_ledger(state / name, entries)
    _take_over_landed(drop / f".{LANDED_DIR}", state / LANDED_DIR, max_bytes, warn)


def _take_over_landed(old: Path, landed: Path, max_bytes: int, warn: Callable[[str], None]) -> None:
    try:
        folder = os.open(old, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:  # ELOOP, ENOTDIR
        warn(f"{old}: not a folder ({exc.strerror}); earlier landed files, not taken over")
        return
    try:
        if os.fstat(folder).st_uid != os.geteuid():
            warn(f"{old}: not this user's own folder; earlier landed files, not taken over")
            return
        for name in sorted(n for n in os.listdir(folder) if not n.startswith(".")):
            try:
                fd, st = open_own(name, max_bytes, dir_fd=folder)
            except (OSError, ValueError) as exc:
                warn(f"{old}/{exc} (an earlier landed file, not taken over)")
                continue
            try:
                mode = stat.S_IMODE(st.st_mode) & 0o777
                copy = copy_hashed(_descriptor_chunks(fd), landed, Path(name).suffix, mode, max_bytes, name)
            finally:
                os.close(fd)
            os.replace(copy.path, landed / name)  # the name the processed-ledger knows it by
            os.utime(landed / name, ns=(st.st_atime_ns, st.st_mtime_ns))  # its place in the queue: oldest first
    finally:
        os.close(folder)


def scan(inbox: str, workspace: WorkspaceConfig, warn: Callable[[str], None]) -> list[dict]:
    """Take every new feedback file in ``inbox`` (a folder or an fsspec URL) into the workspace.

    Returns ``[{"sha256", "path" (immutable local copy), "source"}]`` for files whose content was never seen; the
    seen-ledger (content hash -> original path) has it, so renaming or re-sending a file does not take it twice. A
    file that is not a regular file, is larger than ``workspace.inbox_max_mb`` or cannot be read is left where it
    is and ``warn`` hears why.
    """
    folder = _state(workspace, warn)
    max_bytes = int(workspace.inbox_max_mb * (1 << 20))
    new: list[dict] = []
    with _editing(folder / SEEN_FILE) as seen:
        for name, source in _sources(inbox):
            try:
                sha = source.digest(max_bytes)
                if sha in seen:
                    continue
                landed = source.land(folder / LANDED_DIR, max_bytes)
            except (Refused, OSError) as exc:  # OSError: e.g. another user's file this one may not read
                warn(f"{exc} (left for a later scan)" if isinstance(exc, OSError) else str(exc))
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
    names = (str(p) for p in inbox_names(root)) if local else sorted(fs.find(root))
    for name in names:
        if Path(name).name.startswith(".") or not name.endswith(FEEDBACK_SUFFIXES):
            continue
        yield name, LocalSource(Path(name)) if local else RemoteSource(fs, name)


def pending_files(workspace: WorkspaceConfig, warn: Callable[[str], None]) -> list[str]:
    """Landed inbox files not yet appended to the feedback dataset, oldest first. A file the feedback reader refuses
    (its error names the line and the cause) is recorded as ``rejected: <reason>`` and ``warn`` hears it: it never
    blocks the files behind it."""
    state = _state(workspace, warn)
    done = _read_ledger(state / PROCESSED_FILE)
    files = [p for p in (state / LANDED_DIR).glob("*") if p.is_file() and not p.name.startswith(".")]
    pending = sorted((p for p in files if p.name not in done), key=lambda p: p.stat().st_mtime)
    return [str(p) for p in pending if _readable(p, state, warn)]


def _readable(path: Path, state: Path, warn: Callable[[str], None]) -> bool:
    try:
        load_feedback(path)  # what appending it reads
        return True
    except ValueError as exc:
        source = next((n for sha, n in _read_ledger(state / SEEN_FILE).items() if path.stem == sha[:32]), path.name)
        with _editing(state / PROCESSED_FILE) as ledger:
            ledger[path.name] = f"rejected: {exc}"
        warn(f"inbox file {source} rejected (the other files go on): {exc}")
        return False


def mark_processed(path: str, version: int, workspace: WorkspaceConfig) -> None:
    with _editing(_state(workspace, _unheard) / PROCESSED_FILE) as ledger:
        ledger[Path(path).name] = f"feedback version {version}"


def _unheard(_message: str) -> None:
    """Nothing to hear: a file is marked after :func:`pending_files` made the inbox's folder."""
