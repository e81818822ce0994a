"""Where everything a pipeline writes lives."""

from __future__ import annotations

from pydantic import Field

from t2g_core.config.base import StageConfig


class WorkspaceConfig(StageConfig):
    root: str = Field(
        "t2g-workspace",
        description="Workspace folder holding artifacts/, models/, mlflow.db and the Prefect home; a relative path is "
        "relative to the folder the command runs in (outputs go where you work, inputs are found next to the recipe).",
    )
    mlflow_tracking_uri: str | None = Field(
        None,
        description="MLflow tracking URI; default `sqlite:///WORKSPACE/mlflow.db` in the workspace folder (or an "
        "http:// server, e.g. from `make up`).",
    )
    mlflow_experiment: str = Field("text2grad", description="MLflow experiment that holds the pipeline runs.")
    inbox_max_mb: float = Field(
        1024.0,
        gt=0,
        description="The feedback sensor takes inbox files of at most this many MiB (larger ones are logged and left).",
    )
    stale_temp_hours: float = Field(
        24.0,
        gt=0,
        description="At the start of a pipeline run, temporary files and folders that killed writers left in the "
        "workspace and that are older than this many hours are removed.",
    )
