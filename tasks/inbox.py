"""The feedback inbox: new files are content-hashed, copied to an immutable place and announced once."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import task

from t2g_core.config import WorkspaceConfig

FEEDBACK_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
LANDED_DIR, SEEN_FILE, PROCESSED_FILE = ".landed", ".seen.json", ".processed.json"


def _inbox(workspace: WorkspaceConfig) -> Path:
    from t2g_core.workspace import Workspace

    return Workspace.at(workspace.root).inbox


def _ledger(path: Path) -> dict[str, str]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _save_ledger(path: Path, data: dict[str, str]) -> None:
    from t2g_core.store import write_text_atomic

    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))


@task(name="scan-inbox", timeout_seconds=300, retries=2, retry_delay_seconds=[5, 30])
def scan_inbox(inbox: str, workspace: WorkspaceConfig) -> list[dict]:
    """Hash every feedback file in ``inbox`` (a folder or an fsspec URL); copy unseen ones into the workspace.

    Returns ``[{"sha256", "path" (immutable local copy), "source"}]`` for files whose content was never seen; the
    seen-set is the file ``<workspace>/inbox/.seen.json`` (content hash -> original path), so renaming or re-sending
    a file does not announce it twice.
    """
    import hashlib

    import fsspec

    from t2g_core.store import write_bytes_atomic

    folder = _inbox(workspace)
    seen_path = folder / SEEN_FILE
    seen = _ledger(seen_path)
    fs, root = fsspec.core.url_to_fs(inbox)
    landed_dir = folder / LANDED_DIR
    landed_dir.mkdir(parents=True, exist_ok=True)
    new: list[dict] = []
    for name in sorted(fs.find(root)):
        if Path(name).name.startswith(".") or f"/{LANDED_DIR}/" in name or not name.endswith(FEEDBACK_SUFFIXES):
            continue
        data = fs.cat_file(name)
        sha = hashlib.sha256(data).hexdigest()
        if sha in seen:
            continue
        copy = landed_dir / f"{sha[:32]}{Path(name).suffix}"
        if not copy.exists():
            write_bytes_atomic(copy, data)
        seen[sha] = name
        new.append({"sha256": sha, "path": str(copy), "source": name})
    _save_ledger(seen_path, seen)
    return new


def pending_files(workspace: WorkspaceConfig) -> list[str]:
    """Landed inbox files not yet appended to the feedback dataset, oldest first."""
    folder = _inbox(workspace)
    done = _ledger(folder / PROCESSED_FILE)
    files = [p for p in (folder / LANDED_DIR).glob("*") if p.is_file() and not p.name.startswith(".")]
    return [str(p) for p in sorted(files, key=lambda p: p.stat().st_mtime) if p.name not in done]


def mark_processed(path: str, version: int, workspace: WorkspaceConfig) -> None:
    ledger_path = _inbox(workspace) / PROCESSED_FILE
    ledger = _ledger(ledger_path)
    ledger[Path(path).name] = f"feedback version {version}"
    _save_ledger(ledger_path, ledger)
