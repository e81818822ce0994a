"""The workspace folder: artifacts, models, checkpoints, the MLflow database and the Prefect home."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

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
    def prefect_home(self) -> Path:
        return self.root / "prefect"

    @property
    def mlflow_db(self) -> Path:
        return self.root / "mlflow.db"

    @property
    def mlflow_uri(self) -> str:
        return f"sqlite:///{self.mlflow_db}"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.root / "mlartifacts"

    @property
    def store(self) -> ArtifactStore:
        return ArtifactStore(self.artifacts)
