"""The one way a Prefect task runs a stage function: its key, its MLflow stage run, its context.

``with stage(fn, "ppo", workspace, feedback=..., settings=...) as ctx:`` computes the stage key from the task
function and its parameters exactly as the Prefect cache key is computed (``tasks.caching.stage_cache_key``), opens the
stage's nested MLflow run (its settings as params, the Prefect ids as tags; MLflow system metrics for the stages that
train or generate) and yields the :class:`~t2g_core.stages.context.StageContext` the ``t2g_core.stages`` function
takes: key-addressed outputs in the workspace, an MLflow tracker, the Prefect run logger, Prefect progress artifacts
(``tasks.progress``), and ``force`` when ``--refresh`` named the stage. :func:`run_stage` then runs the stage function
in this process, or as the gang of processes its ``layout`` asks for (``t2g_core.gang``), on the machines its
launcher starts (``t2g_core.machines``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from t2g_core import gang, machines
from t2g_core.config import WorkspaceConfig
from t2g_core.config.orchestration import Layout
from t2g_core.disk import disk_full
from t2g_core.stages.context import StageContext
from t2g_core.stages.registry import SYSTEM_METRICS
from t2g_env import stage_call
from t2g_mlflow.tracker import MlflowTracker
from tasks.caching import forced, task_key
from tasks.links import in_prefect_run, stage_run
from tasks.progress import PrefectProgress


def run_logger():
    """The Prefect run logger inside a run, else the ``text2grad`` logger."""
    import logging

    from prefect import get_run_logger

    return get_run_logger() if in_prefect_run() else logging.getLogger("text2grad")


def _running_task(fn: Any) -> tuple[Any, dict[str, Any] | None]:
    """The running task and its parameters as Prefect's cache key saw them (``fn`` and None outside a task run, e.g.
    ``.fn()``)."""
    from prefect.context import TaskRunContext

    ctx = TaskRunContext.get()
    if ctx is None or ctx.parameters is None:
        return fn, None
    return ctx.task, dict(ctx.parameters)


def mlflow_params(params: dict[str, Any]) -> dict[str, Any]:
    """What a stage run records as MLflow params: its settings' sections flattened, and its inputs' locations."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if hasattr(value, "sections"):  # StageSettings
            out.update(value.model_dump(mode="json", by_alias=True))
        elif hasattr(value, "fingerprint"):
            out[f"input.{name}"] = getattr(value, "path", None) or value.model_dump(mode="json")
    return out


@contextlib.contextmanager
def stage(fn: Any, name: str, workspace: WorkspaceConfig, **params: Any) -> Iterator[StageContext]:
    """Run one stage's work inside its MLflow run with its key-addressed context. A full disk, in whatever disguise
    it surfaces (a file write's ENOSPC, SQLite's "database or disk is full" behind SQLAlchemy's autoflush message),
    is raised as :class:`~t2g_core.disk.DiskFull` naming the workspace and its free space."""
    try:
        with _stage(fn, name, workspace, **params) as ctx:
            yield ctx
    except Exception as exc:
        if (full := disk_full(exc, workspace.root)) is not None:
            raise full from exc
        raise


@contextlib.contextmanager
def _stage(fn: Any, name: str, workspace: WorkspaceConfig, **params: Any) -> Iterator[StageContext]:
    task, parameters = _running_task(fn)
    key = task_key(task, parameters or params)
    system_metrics = name in SYSTEM_METRICS  # the stages that train or generate with a model
    with stage_run(name, mlflow_params(params), workspace, system_metrics=system_metrics) as run:
        log = run_logger()
        yield StageContext.keyed(
            workspace.root,
            key,
            force=forced(),
            tracker=MlflowTracker(run.info.run_id, workspace),
            log=log.info,
            on_progress=PrefectProgress(name, log.info),
            run_id=run.info.run_id,
        )


ACCELERATE = Path(__file__).resolve().parents[1] / "deployments" / "accelerate"  # <layout.accelerate>.yaml


def run_stage(fn: Any, ctx: StageContext, layout: Layout | None, workspace: WorkspaceConfig, **inputs: Any) -> Any:
    """``fn(**inputs, ctx=ctx)`` in this process, or (a layout of several processes) in every rank of the gang this
    starts and waits for; the same typed reference either way, read back from what rank 0 wrote. A forced stage's
    key-named folders are emptied here, once, and the ranks resume from nothing."""
    if layout is None or layout.world == 1:
        return stage_call(fn, inputs, ctx)
    from pydantic import TypeAdapter

    if ctx.force:
        for folder in ctx.workspace.root.glob(f"*/*/{ctx.key}"):
            shutil.rmtree(folder)
    hints = typing.get_type_hints(fn)
    spec = gang.GangRun(
        function=f"{fn.__module__}.{fn.__name__}",
        inputs={k: TypeAdapter(hints[k]).dump_python(v, mode="json", by_alias=True) for k, v in inputs.items()},
        workspace=workspace.model_dump(mode="json"),
        key=ctx.key,
        run_id=ctx.run_id,
        world=layout.world,
        folder=str(ctx.workspace.root / "gang" / ctx.key),
    )
    config = ACCELERATE / f"{layout.accelerate}.yaml"
    code = str(Path(__file__).resolve().parents[1])  # the ranks run the code this process runs (its stage key)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")]))}
    launch = functools.partial(gang.launch_command, spec, layout, config)
    command = machines.command(layout, launch, Path(spec.folder), ctx.key, env)
    ctx.log(f"{layout.world} processes ({layout.accelerate}, {layout.launcher}) run the stage: {' '.join(command)}")
    return TypeAdapter(hints["return"]).validate_json(gang.launch(spec, command, env, ctx.log, ctx.on_progress))
