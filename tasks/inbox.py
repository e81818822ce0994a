"""The feedback inbox: new files are content-hashed, copied to an immutable place and announced once.

The inbox is written by others: only regular files of at most ``workspace.inbox_max_mb`` are taken, hashed and
copied in chunks (``t2g_core.inbox``: no symlink, FIFO or device is opened, and a copy keeps the source's
permission bits); what is refused is logged and left where it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from prefect import task

from t2g_core.config import WorkspaceConfig

FEEDBACK_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
LANDED_DIR, SEEN_FILE, PROCESSED_FILE = ".landed", ".seen.json", ".processed.json"


def _inbox(workspace: WorkspaceConfig) -> Path:
    from t2g_core.workspace import Workspace

    return Workspace.at(workspace.root).inbox


def _ledger(path: Path) -> dict[str, str]:
    from t2g_core.store import read_json

    return read_json(path) if path.exists() else {}


def _save_ledger(path: Path, data: dict[str, str]) -> None:
    from t2g_core.store import write_text_atomic

    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))


def _held(ledger: Path):
    """The ledger's one-writer lock: two scans (or two runs marking files) take turns."""
    from t2g_core.locks import folder_lock

    return folder_lock(ledger, f"the feedback inbox (pid {os.getpid()})", wait_s=120)


@task(name="scan-inbox", timeout_seconds=300, retries=2, retry_delay_seconds=[5, 30])
def scan_inbox(inbox: str, workspace: WorkspaceConfig) -> list[dict]:
    """Take every new feedback file in ``inbox`` (a folder or an fsspec URL) into the workspace.

    Returns ``[{"sha256", "path" (immutable local copy), "source"}]`` for files whose content was never seen; the
    seen-set is the file ``<workspace>/inbox/.seen.json`` (content hash -> original path), so renaming or re-sending
    a file does not announce it twice. A file that is not a regular file, or is larger than the cap, is logged and
    not taken.
    """
    from t2g_core.inbox import Refused

    folder = _inbox(workspace)
    max_bytes = int(workspace.inbox_max_mb * (1 << 20))
    new: list[dict] = []
    with _held(folder / SEEN_FILE):
        seen = _ledger(folder / SEEN_FILE)
        for name, source in _sources(inbox):
            try:
                sha = source.digest(max_bytes)
                if sha in seen:
                    continue
                landed = source.land(folder / LANDED_DIR, max_bytes)
            except Refused as exc:
                _warn(str(exc))
                continue
            seen[landed.sha256] = name
            new.append({"sha256": landed.sha256, "path": str(landed.path), "source": name})
        _save_ledger(folder / SEEN_FILE, seen)
    return new


def _warn(message: str) -> None:
    """A refusal in the run log, or (a scan outside any run: the serve process's inbox watch) in its process log."""
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_logger

    try:
        get_run_logger().warning("%s", message)
    except MissingContextError:
        get_logger("text2grad.inbox").warning("%s", message)


class LocalSource:
    """A name in a local inbox folder: read only when it is a regular file (``t2g_core.inbox``)."""

    def __init__(self, path: Path):
        self.path = path

    def digest(self, max_bytes: int) -> str:
        from t2g_core.inbox import file_digest

        return file_digest(self.path, max_bytes)

    def land(self, folder: Path, max_bytes: int):
        from t2g_core.inbox import land

        return land(self.path, folder, max_bytes)


class RemoteSource:
    """A file of an fsspec file system (an object store): streamed; its copy is private (0600)."""

    def __init__(self, fs, name: str):
        self.fs, self.name = fs, name

    def _chunks(self, max_bytes: int) -> Iterator[bytes]:
        from t2g_core.inbox import CHUNK, Refused

        size = self.fs.size(self.name)
        if size is not None and size > max_bytes:
            raise Refused(f"{self.name}: {size} bytes, larger than the inbox's cap of {max_bytes} bytes; not taken")
        with self.fs.open(self.name, "rb") as f:
            while block := f.read(CHUNK):
                yield block

    def digest(self, max_bytes: int) -> str:
        from t2g_core.inbox import chunks_digest

        return chunks_digest(self._chunks(max_bytes), max_bytes, self.name)

    def land(self, folder: Path, max_bytes: int):
        from t2g_core.inbox import PRIVATE, copy_hashed

        return copy_hashed(self._chunks(max_bytes), folder, Path(self.name).suffix, PRIVATE, max_bytes, self.name)


def _sources(inbox: str) -> Iterator[tuple[str, LocalSource | RemoteSource]]:
    """The feedback files of ``inbox`` (a local folder, walked without following symlinked folders, or a URL)."""
    import fsspec

    from t2g_core.inbox import inbox_names

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
    ledger_path = _inbox(workspace) / PROCESSED_FILE
    with _held(ledger_path):
        ledger = _ledger(ledger_path)
        ledger[Path(path).name] = f"feedback version {version}"
        _save_ledger(ledger_path, ledger)
