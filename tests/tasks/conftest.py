"""Fixtures for task tests: call ``task.fn(...)`` on temporary Parquet with a fresh, pre-migrated MLflow store.

- ``workspace_cfg``: a ``WorkspaceConfig`` whose root is ``tmp_path`` (its MLflow store starts as the kept copy of a
  migrated one, as every new workspace's: t2g_env.kept_databases); ``fresh_workspace(root)`` makes another (two runs
  of one stage compared in a test).
- ``run_task(task, *args, **kwargs)``: runs the task's function without a Prefect API (``disable_run_logger``).
- for the stages run as a gang of processes (``tests/tasks/test_gang*.py``): ``gloo`` (one thread a rank).
"""

from __future__ import annotations

import pytest


@pytest.fixture
def workspace_cfg(tmp_path, fresh_workspace):
    return fresh_workspace(tmp_path)


@pytest.fixture
def run_task():
    from prefect.logging import disable_run_logger

    def _run(task, *args, **kwargs):
        with disable_run_logger():
            return task.fn(*args, **kwargs)

    return _run


@pytest.fixture
def gloo(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture
def fresh_workspace(monkeypatch):
    from t2g_core.config import WorkspaceConfig

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)

    def make(root):
        root.mkdir(parents=True, exist_ok=True)
        return WorkspaceConfig(root=str(root))

    return make
