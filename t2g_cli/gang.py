"""``t2g gang-rank SPEC`` (hidden): one rank of a stage run as a gang (``t2g_core.gang``), started by ``accelerate
launch`` in every process with the same typed inputs; rank 0 reports to the stage's tracking run and writes its
output reference. Each rank's stderr (and the other ranks' stdout) goes to ``rank-<r>.log`` beside the spec.
``t2g gang-jobset MANIFEST`` (hidden): a gang's machines as a Kubernetes JobSet (``t2g_core.machines``)."""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import typing
from pathlib import Path

import typer

from t2g_cli._common import echo, fail, join_processes
from t2g_core import machines
from t2g_core.config import WorkspaceConfig
from t2g_core.gang import OUTPUT, PROGRESS, GangRun, print_progress
from t2g_core.progress import no_progress
from t2g_core.stages.context import StageContext
from t2g_core.store import write_text_atomic
from t2g_core.tracking import NullTracker
from t2g_env import stage_call
from t2g_mlflow.experiment import configure
from t2g_mlflow.tracker import MlflowTracker


def gang_rank(spec_file: Path = typer.Argument(..., help="The gang's gang.json.")) -> None:
    """Run one rank of a stage's gang."""
    from pydantic import TypeAdapter

    spec = GangRun.model_validate_json(spec_file.read_text(encoding="utf-8"))
    rank = int(os.environ.get("RANK", "0"))
    log = open(spec.file(f"rank-{rank}.log"), "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - for the process
    os.dup2(log.fileno(), 2)
    if rank:
        os.dup2(log.fileno(), 1)
    join_processes(spec.world)
    module, _, name = spec.function.rpartition(".")
    if not module.startswith("t2g_core.stages."):
        fail(f"{spec.function} is not a stage function")
    fn = getattr(importlib.import_module(module), name)
    hints = typing.get_type_hints(fn)
    inputs = {k: TypeAdapter(hints[k]).validate_python(v) for k, v in spec.inputs.items()}
    workspace = WorkspaceConfig.model_validate(spec.workspace)
    ctx = StageContext.keyed(
        workspace.root,
        spec.key,
        run_id=spec.run_id,
        tracker=_tracker(spec.run_id, workspace) if rank == 0 else NullTracker(),
        log=echo,
        on_progress=print_progress if rank == 0 else no_progress,
    )
    ref = stage_call(fn, inputs, ctx)
    if rank == 0:
        write_text_atomic(spec.file(OUTPUT), ref.model_dump_json())


def _tracker(run_id: str | None, workspace: WorkspaceConfig):
    if run_id is None:
        return NullTracker()
    configure(workspace)
    return MlflowTracker(run_id, workspace)


def gang_jobset(manifest: Path = typer.Argument(..., help="The gang's jobset.json.")) -> None:
    """Run a gang's machines as a JobSet from this pod: pod 0's log goes to stdout (and, but its progress lines, to
    stderr: the launcher's log, where a failed rank is looked up); exits 1 when the JobSet failed."""
    import httpx

    def out(line: str) -> None:
        print(line, flush=True)
        if not line.startswith(PROGRESS):
            print(line, file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped task: the JobSet is deleted on the way out
    api, namespace = machines.cluster(os.environ)
    pod = os.environ["HOSTNAME"]  # a pod's host name is its name
    try:
        code = machines.run_jobset(api, namespace, json.loads(manifest.read_text(encoding="utf-8")), pod, out)
    except httpx.HTTPStatusError as exc:  # e.g. no JobSet controller, or a service account without rbac.yaml's rights
        fail(f"the Kubernetes API refused {exc.request.method} {exc.request.url.path}: {exc.response.text[:400]}", 1)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("gang-rank", hidden=True)(gang_rank)
    app.command("gang-jobset", hidden=True)(gang_jobset)
