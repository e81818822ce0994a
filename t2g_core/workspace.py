"""The workspace folder: artifacts, models, checkpoints, the MLflow database and the Prefect home."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from t2g_core.store import ArtifactStore


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def at(cls, root: str | Path) -> Workspace:
        ws = cls(Path(root).resolve())
        for sub in (ws.artifacts, ws.models, ws.checkpoints, ws.reports, ws.inbox):
            sub.mkdir(parents=True, exist_ok=True)
        inbox = ws.inbox.stat()
        if not inbox.st_mode & stat.S_ISVTX and inbox.st_uid == os.geteuid():
            ws.inbox.chmod(inbox.st_mode | stat.S_ISVTX)  # a drop box: whoever may drop a file may not delete another's
        return ws

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def inbox(self) -> Path:
        """The drop folder for new feedback files (sticky; who may drop files is its mode's choice, 0700 as made under
        ``t2g run``'s umask: docs/operations.md); the inbox's own state is in ``artifacts/inbox``."""
        return self.root / "inbox"

    @property
    def mlflow_db(self) -> Path:
        return self.root / "mlflow.db"

    @property
    def store(self) -> ArtifactStore:
        return ArtifactStore(self.artifacts)


def relocated(value: Any, root: str | Path) -> Any:
    """``value`` (a stage reference, or dicts and lists of them) with its paths under a moved workspace folder rewritten
    under ``root``; ``value`` itself when nothing moved. The old folder is the shallowest ancestor of a missing path
    whose remainder exists under ``root``."""
    root = Path(root).resolve()
    old = next((found for text in _strings(value) if (found := _old_root(Path(text), root)) is not None), None)
    return value if old is None else _rebased(value, old, root)


def _old_root(path: Path, root: Path) -> Path | None:
    if not path.is_absolute() or path.is_relative_to(root) or path.exists():
        return None
    return next((a for a in reversed(path.parents) if (root / path.relative_to(a)).exists()), None)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _strings(getattr(value, name))
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _rebased(value: Any, old: Path, root: Path) -> Any:
    if isinstance(value, str):
        path = Path(value)
        return str(root / path.relative_to(old)) if path.is_absolute() and path.is_relative_to(old) else value
    if isinstance(value, BaseModel):
        return value.model_copy(update={n: _rebased(getattr(value, n), old, root) for n in type(value).model_fields})
    if isinstance(value, dict):
        return {key: _rebased(item, old, root) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_rebased(item, old, root) for item in value)
    return value
