"""The library's tracker protocol (``t2g_core.tracking.Tracker``) over one MLflow run.

Thread-safe: every call names its run id explicitly (no fluent, thread-local active run), so a trainer's worker
threads may log too.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from t2g_mlflow.datasets import log_dataset
from t2g_mlflow.runs import PARAM_MAX
from t2g_mlflow.tags import OUTPUT_CONTEXT

if TYPE_CHECKING:
    from t2g_core.config import WorkspaceConfig
    from t2g_core.store import ArtifactRef


class MlflowTracker:
    """Metrics, files, params and datasets into the MLflow run ``run_id`` (default: the active run); datasets are named
    by their version in ``workspace`` (``t2g_core.datasets.dataset_name``)."""

    def __init__(self, run_id: str | None = None, workspace: WorkspaceConfig | None = None):
        import mlflow

        if run_id is None:
            active = mlflow.active_run()
            if active is None:
                raise RuntimeError("MlflowTracker() needs an active MLflow run (use it inside stage_run) or a run_id")
            run_id = active.info.run_id
        self.run_id, self.workspace = run_id, workspace

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        import time

        from mlflow import MlflowClient
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        batch = [
            Metric(k, float(v), ts, step or 0)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        if batch:
            MlflowClient().log_batch(self.run_id, metrics=batch)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        from mlflow import MlflowClient

        path = Path(path)
        if path.is_dir():
            MlflowClient().log_artifacts(self.run_id, str(path), artifact_path=artifact_path)
        else:
            MlflowClient().log_artifact(self.run_id, str(path), artifact_path=artifact_path)

    def log_input(self, ref: ArtifactRef, name: str, context: str) -> None:
        """A dataset the stage read (tagged with the run that produced it, when known)."""
        log_dataset(ref, name, context, run_id=self.run_id, workspace=self.workspace)

    def log_output(self, ref: ArtifactRef, name: str) -> None:
        log_dataset(ref, name, OUTPUT_CONTEXT, run_id=self.run_id)

    def log_params(self, params: Mapping[str, str]) -> None:
        from mlflow import MlflowClient
        from mlflow.entities import Param

        MlflowClient().log_batch(self.run_id, params=[Param(k, str(v)[:PARAM_MAX]) for k, v in params.items()])
