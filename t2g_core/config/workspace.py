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
