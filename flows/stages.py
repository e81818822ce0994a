"""Looking up stage tasks, and the shared bookkeeping of the stage flows (cache, refresh, not-yet-built stages)."""

from __future__ import annotations

import importlib
from typing import Any, Literal

from prefect import get_run_logger

# Names accepted by `t2g run --refresh` and the `refresh` flow parameter, in pipeline order.
Stage = Literal["feedback", "models", "annotate", "align", "validate", "reward_model", "ppo", "evaluate"]
STAGES: tuple[str, ...] = ("feedback", "models", "annotate", "align", "validate", "reward_model", "ppo", "evaluate")


def downstream(refresh: list[str] | None) -> set[str]:
    """Refreshing a stage re-runs it and every stage after it (their inputs are about to change)."""
    if not refresh:
        return set()
    unknown = set(refresh) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown stage(s) to refresh: {sorted(unknown)}; choose from {', '.join(STAGES)}")
    first = min(STAGES.index(s) for s in refresh)
    return set(STAGES[first:])


def stage_task(module: str, name: str) -> Any | None:
    """``tasks.<module>.<name>``, or None while that stage's task module has not been written."""
    try:
        mod = importlib.import_module(f"tasks.{module}")
    except ModuleNotFoundError as exc:
        if exc.name == f"tasks.{module}":
            return None
        raise
    return getattr(mod, name, None)


def not_built(stage: str, reason: str = "its task module is not written yet") -> dict[str, str]:
    """What a stage flow returns when its stage cannot run: a plain status the summary prints."""
    get_run_logger().warning("stage %s skipped: %s", stage, reason)
    return {"status": "not built", "stage": stage, "reason": reason}


def is_ref(value: Any) -> bool:
    """True for a stage's output (any dict but the marker :func:`not_built` returns)."""
    return isinstance(value, dict) and value.get("status") != "not built"


def _pipeline_config(flow_run) -> Any:
    from t2g_core.config import PipelineConfig

    raw = (flow_run.parameters or {}).get("config") or {}
    return raw if isinstance(raw, PipelineConfig) else PipelineConfig.model_validate(raw)


def open_tracking(flow, flow_run, state) -> None:
    """Flow hook (on_running): the MLflow parent run of this flow run, reused on a retry, with the config as params."""
    import mlflow

    from tasks import tracking

    cfg = _pipeline_config(flow_run)
    run_id = tracking.pipeline_run_id(cfg.workspace, root_id=str(flow_run.id), flow_name=flow.name)
    client = mlflow.MlflowClient()
    if not client.get_run(run_id).data.params:
        params = tracking.flatten_params(cfg)
        client.log_batch(run_id, params=[mlflow.entities.Param(k, v) for k, v in params.items()])


def close_tracking(flow, flow_run, state) -> None:
    """Flow hook (on_completion / on_failure / on_crashed): finish or fail the MLflow parent run."""
    from tasks import tracking

    cfg = _pipeline_config(flow_run)
    tracking.end_pipeline_run(str(flow_run.id), cfg.workspace, "FINISHED" if state.is_completed() else "FAILED")


GPU_POOL_ENV = "T2G_GPU_POOL"  # "1": run the training stage flows as their *-gpu deployments (deployments/prefect.yaml)


def run_stage(stage_flow, **params: Any) -> Any:
    """Call a stage flow in-process, or, with ``T2G_GPU_POOL=1``, as its ``<flow>/<flow>-gpu`` deployment on a GPU
    work pool (waiting for it; its JSON result must be on storage both sides see, e.g. the shared /workspace)."""
    import os

    if os.environ.get(GPU_POOL_ENV) != "1":
        return stage_flow(**params)
    from prefect.deployments import run_deployment

    name = f"{stage_flow.name}/{stage_flow.name}-gpu"
    jsonable = {
        k: sorted(v)
        if isinstance(v, set)
        else (v.model_dump(mode="json", by_alias=True) if hasattr(v, "model_dump") else v)
        for k, v in params.items()
    }
    flow_run = run_deployment(name, parameters=jsonable, as_subflow=True)
    if not flow_run.state.is_completed():
        raise RuntimeError(f"{name}: flow run {flow_run.id} ended {flow_run.state.name}")
    return flow_run.state.result()
