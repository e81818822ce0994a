"""Fixtures for task tests: call ``task.fn(...)`` on temporary Parquet with a fresh, pre-migrated MLflow store.

- ``workspace_cfg``: a ``WorkspaceConfig`` whose root is ``tmp_path``; its ``mlflow.db`` is a copy of a database
  migrated once per session (creating one takes about a second; copying it, milliseconds).
- ``run_task(task, *args, **kwargs)``: runs the task's function without a Prefect API (``disable_run_logger``).
"""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def workspace_cfg(tmp_path, mlflow_template_db, monkeypatch):
    from t2g_core.config import WorkspaceConfig

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    shutil.copy(mlflow_template_db, tmp_path / "mlflow.db")
    return WorkspaceConfig(root=str(tmp_path))


@pytest.fixture
def run_task():
    from prefect.logging import disable_run_logger

    def _run(task, *args, **kwargs):
        with disable_run_logger():
            return task.fn(*args, **kwargs)

    return _run
