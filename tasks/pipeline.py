"""The pipeline run's own bookkeeping: its MLflow parent run, what a Retry after a crash must close, its outputs.

- ``open_pipeline_run`` (flow hook, on_running): the MLflow parent run of this flow run (reused on a retry) with the
  configuration as params, tagged with the process running it. On a retry it first closes what the killed attempt
  left open: Prefect task runs and subflow runs still Running or Pending become Crashed, MLflow stage runs still
  RUNNING become KILLED, and the run log says how the previous attempt ended. Every start also closes the runs of
  other pipelines whose process on this machine is gone (killed outside a Retry: ``kill -9``, a closed terminal):
  their MLflow runs become KILLED and their Prefect flow runs Crashed. It also removes the temporary files that
  killed writers left in the workspace, once they are older than ``STALE_HOURS`` (24).
- ``record_outputs`` (task): the parent run links every stage output the pipeline used, cached or not.
- ``close_stale_runs`` (flow hook, on_failure / on_crashed): what the ended attempt left Running is closed at once.
- ``close_pipeline_run`` (flow hook): the parent run ends FINISHED or FAILED.
- ``HOOKS``: the three hooks as a pipeline flow takes them.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from t2g_core.config import PipelineConfig, WorkspaceConfig
from t2g_core.config.presets import with_preset
from t2g_core.housekeeping import STALE_HOURS, collect_stale_temporaries
from t2g_core.locks import identity_alive, process_identity
from t2g_core.stages.registry import typed_outputs
from t2g_env import serving
from t2g_mlflow import runs
from tasks.links import root_flow_run_id

ACTIVE = ("RUNNING", "PENDING")


def _pipeline_config(flow_run) -> PipelineConfig:
    """The configuration the flow run works with: its ``config`` parameter with its ``preset`` applied."""
    params = flow_run.parameters or {}
    raw = params.get("config") or {}
    cfg = raw if isinstance(raw, PipelineConfig) else PipelineConfig.model_validate(raw)
    return with_preset(cfg, params.get("preset"))


def flow_run_tree(client, root_id) -> list:
    """``root_id`` and every subflow run below it."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    found, frontier = [], [root_id]
    while frontier:
        found += frontier
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier))
        )
        frontier = [r.id for r in children if r.id not in found]
    return found


def crash_stale_runs(flow_run_id, reason: str, *, root: bool = False) -> list[str]:
    """Task runs and subflow runs of ``flow_run_id`` (and, with ``root``, the flow run itself) still Running/Pending
    (their process is gone) -> Crashed."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateType,
        TaskRunFilter,
        TaskRunFilterState,
        TaskRunFilterStateType,
    )
    from prefect.states import Crashed

    closed: list[str] = []
    with get_client(sync_client=True) as client:
        tree = flow_run_tree(client, flow_run_id)
        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=tree)),
            task_run_filter=TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=list(ACTIVE)))),
        )
        for tr in tasks:
            client.set_task_run_state(tr.id, Crashed(message=reason), force=True)
            closed.append(f"task run {tr.name}")
        subflows = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[f for f in tree if root or f != flow_run_id]),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=list(ACTIVE))),
            )
        )
        for fr in subflows:
            client.set_flow_run_state(fr.id, Crashed(message=reason), force=True)
            closed.append(f"flow run {fr.name}")
    return closed


def previous_attempt(flow_run_id) -> str | None:
    """How the previous attempt of this flow run ended (state name and message), or None on the first attempt."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        states = client.read_flow_run_states(flow_run_id)
    ended = [s for s in states if s.is_final() or s.name == "AwaitingRetry"]
    final = [s for s in ended if s.is_final()]
    if not final:
        return None
    last = max(final, key=lambda s: s.timestamp)
    return f"{last.name}: {last.message or 'no message'}"


def _nested(flow_run) -> bool:
    """A pipeline flow run started inside another (``reannotate`` continuing to ``text2grad``): the root's hooks keep
    the one MLflow parent run and close what is left open, for the whole tree."""
    return flow_run.parent_task_run_id is not None


def open_pipeline_run(flow, flow_run, state) -> None:
    """Flow hook (on_running): close what a killed attempt left open, then open (or reuse) the MLflow parent run."""
    from prefect.logging.loggers import flow_run_logger

    if _nested(flow_run):
        return
    log = flow_run_logger(flow_run, flow)
    cfg = _pipeline_config(flow_run)
    if not serving.allowed(cfg):
        return  # refused by the serve-time policy: its tracking settings are not to be used
    previous = previous_attempt(flow_run.id)
    if previous is not None:
        log.info("retrying; the previous attempt ended %s", previous)
        reason = f"the previous attempt of flow run {flow_run.id} ended {previous}"
        for closed in crash_stale_runs(flow_run.id, reason):
            log.info("marked %s Crashed (its process is gone)", closed)
    _collect_stale_temporaries(cfg.workspace, log)
    run_id = runs.pipeline_run_id(cfg.workspace, root_id=str(flow_run.id), flow_name=flow.name)
    runs.record_process(run_id, process_identity())
    if previous is not None:
        for killed in runs.close_stale_stage_runs(run_id, f"retry after: {previous}"):
            log.info("MLflow stage run %s marked KILLED (left RUNNING by the previous attempt)", killed)
    _close_dead_pipelines(cfg.workspace, str(flow_run.id), log)
    runs.log_params_once(run_id, cfg)


def _close_dead_pipelines(workspace: WorkspaceConfig, flow_run_id: str, log) -> None:
    """Close the runs of pipelines whose process on this machine is gone (see the module docstring)."""
    reason = f"its process ended without closing it (killed); closed when flow run {flow_run_id} started"
    for other in runs.close_dead_pipeline_runs(workspace, lambda p: identity_alive(p) is False, reason):
        if other == flow_run_id:
            continue
        closed = crash_stale_runs(other, reason, root=True)
        marked = ", ".join(closed) or "nothing in Prefect (its flow run had ended there)"
        log.info("pipeline flow run %s was left running by a killed process: marked %s Crashed", other, marked)


def _collect_stale_temporaries(workspace: WorkspaceConfig, log) -> None:
    from pathlib import Path

    if Path(workspace.root).is_dir():
        removed = collect_stale_temporaries(workspace.root)
        if removed:
            names = ", ".join(str(p) for p in removed[:5]) + (" ..." if len(removed) > 5 else "")
            log.info(
                "removed %d temporary file(s) or folder(s) that killed writes left (older than %g h): %s",
                len(removed),
                STALE_HOURS,
                names,
            )


def close_stale_runs(flow, flow_run, state) -> None:
    """Flow hook (on_failure / on_crashed): task runs and subflow runs the ended attempt left Running become Crashed,
    and its MLflow stage runs left RUNNING become KILLED, at once (on a crash the runner that watched the killed
    process runs this). A Retry finds nothing left to close."""
    from prefect.logging.loggers import flow_run_logger

    if _nested(flow_run):
        return
    cfg = _pipeline_config(flow_run)
    if not serving.allowed(cfg):
        return  # refused before it ran (parameter validation): nothing was started for it
    log = flow_run_logger(flow_run, flow)
    reason = f"flow run {flow_run.id} ended {state.name}: {state.message or 'no message'}"
    for closed in crash_stale_runs(flow_run.id, reason):
        log.info("marked %s Crashed (its process is gone)", closed)
    run_id = runs.pipeline_run_id(cfg.workspace, create=False, root_id=str(flow_run.id))
    for killed in runs.close_stale_stage_runs(run_id, reason) if run_id else []:
        log.info("MLflow stage run %s marked KILLED (left RUNNING by the ended attempt)", killed)


def close_pipeline_run(flow, flow_run, state) -> None:
    """Flow hook (on_completion / on_failure / on_crashed): finish or fail the MLflow parent run."""
    if _nested(flow_run):
        return
    cfg = _pipeline_config(flow_run)
    if not serving.allowed(cfg):
        return  # refused before it ran (parameter validation): no run was opened for it
    runs.end_pipeline_run(str(flow_run.id), cfg.workspace, "FINISHED" if state.is_completed() else "FAILED")


HOOKS = {  # a pipeline flow's hooks: @flow(name=..., **HOOKS)
    "on_running": [open_pipeline_run],
    "on_completion": [close_pipeline_run],
    "on_failure": [close_stale_runs, close_pipeline_run],
    "on_crashed": [close_stale_runs, close_pipeline_run],
}


@task(name="record-outputs", timeout_seconds=600)
def record_outputs(outputs: dict[str, Any], workspace: WorkspaceConfig) -> str | None:
    """Link every stage output (cached or not) to the pipeline's MLflow parent run; returns the parent run id."""
    return runs.link_pipeline_outputs(typed_outputs(outputs), workspace, root_flow_run_id())
