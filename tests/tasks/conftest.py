"""Fixtures for task tests: call ``task.fn(...)`` on temporary Parquet with a fresh, pre-migrated MLflow store.

- ``workspace_cfg``: a ``WorkspaceConfig`` whose root is ``tmp_path``; its ``mlflow.db`` is a copy of a database
  migrated once per session (creating one takes about a second; copying it, milliseconds); ``fresh_workspace(root)``
  makes another (two runs of one stage compared in a test).
- ``run_task(task, *args, **kwargs)``: runs the task's function without a Prefect API (``disable_run_logger``).
- for the stages run as a gang of processes (``tests/tasks/test_gang*.py``): ``gloo`` (one thread a rank) and
  ``live_ranks(workspace)`` (the gang's rank processes still alive).
"""

from __future__ import annotations

import shutil

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
def fresh_workspace(mlflow_template_db, monkeypatch):
    from t2g_core.config import WorkspaceConfig

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)

    def make(root):
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(mlflow_template_db, root / "mlflow.db")
        return WorkspaceConfig(root=str(root))

    return make


@pytest.fixture
def live_ranks():
    """The rank processes of a workspace's gangs still alive (their command line names its gang folder)."""
    from pathlib import Path

    import psutil

    def find(workspace) -> list:
        folder = str(Path(workspace.root) / "gang")
        return [
            p
            for p in psutil.process_iter(["cmdline"])
            if "gang-rank" in (c := " ".join(p.info["cmdline"] or [])) and folder in c
        ]

    return find
