"""Fixtures for task tests: call ``task.fn(...)`` on temporary Parquet with a fresh, pre-migrated MLflow store.

- ``workspace_cfg``: a ``WorkspaceConfig`` whose root is ``tmp_path`` (its MLflow store starts as the kept copy of a
  migrated one, as every new workspace's: t2g_env.kept_databases); ``fresh_workspace(root)`` makes another (two runs
  of one stage compared in a test).
- ``run_task(task, *args, **kwargs)``: runs the task's function without a Prefect API (``disable_run_logger``).
- for the stages run as a gang of processes (``tests/tasks/test_gang*.py``): ``gloo`` (one thread a rank) and
  ``kill_rank_one(workspace, train, ready)`` (a gang's rank 1 SIGKILLed mid-run; ``live_ranks``: tests/conftest.py).
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


@pytest.fixture
def kill_rank_one(live_ranks):
    """Runs ``train()`` (a gang's stage) in a thread, SIGKILLs rank 1 once ``ready()`` (a checkpoint is written), and
    checks that the stage failed naming that rank and that no rank or launcher of the workspace is left."""
    import signal
    import threading
    import time

    from t2g_core.gang import GangFailed

    def kill(workspace, train, ready) -> None:
        outcome: dict = {}

        def first_run():
            try:
                outcome["ref"] = train()
            except Exception as exc:  # noqa: BLE001 - the test reads it
                outcome["error"] = exc

        thread = threading.Thread(target=first_run)
        thread.start()
        deadline = time.monotonic() + 180
        while not ready():
            assert time.monotonic() < deadline and thread.is_alive(), outcome
            time.sleep(0.1)
        rank1 = next(p for p in live_ranks(workspace) if p.environ().get("RANK") == "1")
        rank1.send_signal(signal.SIGKILL)
        thread.join(120)
        assert isinstance(outcome.get("error"), GangFailed), outcome
        assert "rank 1 of the 2-process gang was killed by SIGKILL" in str(outcome["error"])
        assert not live_ranks(workspace)  # the other rank and the launcher are gone too

    return kill
