"""Where everything a pipeline writes lives."""

from __future__ import annotations

from pydantic import Field

from t2g_core.config.base import StageConfig


class WorkspaceConfig(StageConfig):
    SECTION = "workspace"
    RENAMED = {"stale_temp_hours": "`fixed at 24 hours (t2g_core.housekeeping.STALE_HOURS)`"}
    root: str = Field(
        "t2g-workspace",
        description="Workspace folder (artifacts, models, mlflow.db, the Prefect home); relative to the folder the "
        "command runs in.",
    )
    mlflow_tracking_uri: str | None = Field(
        None,
        description="MLflow tracking URI (null: sqlite:///WORKSPACE/mlflow.db; or an http:// server).",
    )
    mlflow_experiment: str = Field("text2grad", description="MLflow experiment that holds the pipeline runs.")
    inbox_max_mb: float = Field(
        1024.0,
        gt=0,
        description="The feedback sensor takes inbox files of at most this many MiB (larger ones are logged and left).",
    )
