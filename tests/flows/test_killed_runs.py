"""A pipeline killed outside a Prefect Retry (``kill -9`` of ``t2g run``, a closed terminal) leaves its Prefect flow
and task runs Running and its MLflow runs RUNNING; the next pipeline that starts in the workspace closes them (the
MLflow runs KILLED with the reason, the Prefect runs Crashed), and leaves alone the runs of live processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prefect import flow, task

from t2g_core.config import PipelineConfig
from tasks.pipeline import close_pipeline_run, open_pipeline_run

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.slow]  # the harness serves a Prefect API
ROOT = Path(__file__).resolve().parents[2]


@flow(name="hooked-pipeline", on_running=[open_pipeline_run], on_completion=[close_pipeline_run])
def hooked(config: PipelineConfig) -> int:
    return 1


@task(name="killed-stage")
def killed_stage() -> None:
    """Stands for the stage a killed pipeline was running."""


def _dead_process() -> str:
    """The identity of a process that has ended (what a killed run's tag names)."""
    code = "from t2g_core.locks import process_identity; print(process_identity())"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip()


def _left_running(cfg: PipelineConfig, identity: str):
    """What a killed pipeline leaves: a Running flow run with a Running task run, and its MLflow parent and stage
    runs RUNNING, the parent tagged with the process that ran it."""
    from mlflow import MlflowClient
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    from t2g_mlflow import runs
    from t2g_mlflow.tags import PARENT_RUN_TAG, ROLE_TAG, STAGE_ROLE

    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(hooked, parameters={}, state=Running())
        task_run = client.create_task_run(killed_stage, flow_run.id, dynamic_key="0", state=Running())
    parent = runs.pipeline_run_id(cfg.workspace, root_id=str(flow_run.id), flow_name="text2grad")
    runs.record_process(parent, identity)
    client = MlflowClient()
    stage = client.create_run(
        client.get_run(parent).info.experiment_id, tags={PARENT_RUN_TAG: parent, ROLE_TAG: STAGE_ROLE}
    )
    return flow_run.id, task_run.id, parent, stage.info.run_id


def test_the_next_pipeline_closes_the_runs_of_a_killed_one_and_spares_live_ones(tmp_path, monkeypatch):
    from mlflow import MlflowClient
    from prefect.client.orchestration import get_client

    from t2g_core.locks import process_identity
    from t2g_mlflow.tags import ENDED_BY_TAG

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = PipelineConfig.model_validate(
        {"workspace": {"root": str(tmp_path), "mlflow_tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}
    )
    killed = _left_running(cfg, _dead_process())
    live = _left_running(cfg, process_identity())  # another pipeline of this (live) process
    assert hooked(cfg) == 1
    client = MlflowClient()
    flow_run, task_run, parent, stage = killed
    assert client.get_run(parent).info.status == "KILLED" and client.get_run(stage).info.status == "KILLED"
    assert "killed" in client.get_run(parent).data.tags[ENDED_BY_TAG]
    with get_client(sync_client=True) as prefect:
        assert prefect.read_flow_run(flow_run).state.name == "Crashed"
        assert prefect.read_task_run(task_run).state.name == "Crashed"
        assert prefect.read_flow_run(live[0]).state.name == "Running"
    assert client.get_run(live[2]).info.status == "RUNNING" and client.get_run(live[3]).info.status == "RUNNING"
