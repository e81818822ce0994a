"""One MLflow parent run per pipeline flow run, one nested run per stage, and what the parent run records.

- The parent run is found again by the tag ``prefect.flow_run_id`` (the *root* flow run), so a Prefect retry of the
  same flow run reuses it instead of creating a duplicate. Stage runs are nested under it and tagged with the Prefect
  flow-run and task-run ids, which the Prefect glue hands in (``tasks.links``: this package never imports Prefect).
- Without those ids (outside a Prefect flow) a stage run is a top-level run.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t2g_mlflow.datasets import log_dataset
from t2g_mlflow.experiment import configure, file_lock, lock, run_url
from t2g_mlflow.tags import (
    ENDED_BY_TAG,
    FLOW_NAME_TAG,
    FLOW_RUN_TAG,
    NOTE_TAG,
    PARENT_RUN_TAG,
    PIPELINE_CONTEXT,
    PIPELINE_ROLE,
    PROCESS_TAG,
    ROLE_TAG,
    ROOT_FLOW_RUN_TAG,
    STAGE_ROLE,
    STAGE_RUN_TAG_PREFIX,
    STAGE_TAG,
)

if TYPE_CHECKING:
    import mlflow

    from t2g_core.config import WorkspaceConfig

PARAM_MAX = 6000  # characters of one param value MLflow accepts


def flatten_params(params: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts / pydantic models -> ``{"a.b": "value"}`` with values cut to MLflow's limit."""
    if hasattr(params, "model_dump"):
        params = params.model_dump(mode="json", by_alias=True)
    out: dict[str, str] = {}
    for key, value in (params or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) or hasattr(value, "model_dump"):
            out.update(flatten_params(value, prefix=f"{name}."))
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            out[name] = text[:PARAM_MAX]
    return out


def _pipeline_filter(root_id: str) -> str:
    return f"tags.`{FLOW_RUN_TAG}` = '{root_id}' and tags.`{ROLE_TAG}` = '{PIPELINE_ROLE}'"


def pipeline_run_id(
    workspace_cfg: WorkspaceConfig, *, create: bool = True, root_id: str | None = None, flow_name: str | None = None
) -> str | None:
    """The parent run of the root Prefect flow run ``root_id`` (if any), found by tag (retries reuse it) or created."""
    from mlflow import MlflowClient

    exp_id = configure(workspace_cfg)
    if root_id is None:
        return None
    client = MlflowClient()
    with lock, file_lock(Path(workspace_cfg.root).resolve() / ".mlflow-parent.lock"):
        found = client.search_runs(
            [exp_id], filter_string=_pipeline_filter(root_id), max_results=1, order_by=["attributes.start_time ASC"]
        )
        if found:
            run = found[0]
            if run.info.status != "RUNNING":
                client.update_run(run.info.run_id, status="RUNNING")
            return run.info.run_id
        if not create:
            return None
        tags = {ROLE_TAG: PIPELINE_ROLE, FLOW_RUN_TAG: root_id, FLOW_NAME_TAG: str(flow_name or "")}
        run = client.create_run(exp_id, run_name=f"{flow_name or 'pipeline'}-{root_id[:8]}", tags=tags)
        return run.info.run_id


def find_pipeline_run(flow_run_id: str, tracking_uri: str, experiment: str) -> str | None:
    """The parent run id of a Prefect flow run in the store at ``tracking_uri`` (read only), or None."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    runs = client.search_runs([exp.experiment_id], _pipeline_filter(flow_run_id))
    return runs[0].info.run_id if runs else None


def log_params_once(run_id: str, params: Any) -> None:
    """``params`` (flattened) on ``run_id`` unless it has params already: a retry reuses its parent run, and MLflow
    refuses to change a logged param."""
    from mlflow import MlflowClient
    from mlflow.entities import Param

    client = MlflowClient()
    if not client.get_run(run_id).data.params:
        client.log_batch(run_id, params=[Param(k, v) for k, v in flatten_params(params).items()])


def end_pipeline_run(flow_run_id: str, workspace_cfg: WorkspaceConfig, status: str = "FINISHED") -> str | None:
    """Mark the parent run of ``flow_run_id`` as finished or failed (a later Prefect retry reopens it)."""
    from mlflow import MlflowClient

    exp_id = configure(workspace_cfg)
    client = MlflowClient()
    for run in client.search_runs([exp_id], filter_string=_pipeline_filter(flow_run_id), max_results=5):
        client.set_terminated(run.info.run_id, status=status)
        return run.info.run_id
    return None


def record_process(run_id: str, identity: str) -> None:
    """Tag the pipeline's parent run with the process running it (``t2g.process``: host, pid, start)."""
    from mlflow import MlflowClient

    MlflowClient().set_tag(run_id, PROCESS_TAG, identity)


def close_dead_pipeline_runs(workspace_cfg: WorkspaceConfig, is_dead, reason: str) -> list[str]:
    """Pipeline runs still RUNNING whose process (tag ``t2g.process``) ``is_dead``: their stage runs and themselves
    are marked KILLED with ``reason``. Returns the Prefect flow-run ids of the runs closed."""
    from mlflow import MlflowClient

    exp_id = configure(workspace_cfg)
    client = MlflowClient()
    running = client.search_runs(
        [exp_id], f"tags.`{ROLE_TAG}` = '{PIPELINE_ROLE}' and attributes.status = 'RUNNING'", max_results=200
    )
    closed = []
    for run in running:
        process = run.data.tags.get(PROCESS_TAG)
        if not process or not is_dead(process):
            continue
        close_stale_stage_runs(run.info.run_id, reason)
        client.set_tag(run.info.run_id, ENDED_BY_TAG, reason)
        client.set_terminated(run.info.run_id, status="KILLED")
        closed.append(run.data.tags.get(FLOW_RUN_TAG, ""))
    return [c for c in closed if c]


def close_stale_stage_runs(parent_run_id: str, reason: str) -> list[str]:
    """Stage runs under ``parent_run_id`` still RUNNING (their process was killed): mark them KILLED with ``reason``
    (tag ``t2g.ended_by``). Called when a flow run starts again (a Retry); returns the runs closed."""
    from mlflow import MlflowClient

    client = MlflowClient()
    parent = client.get_run(parent_run_id)
    stale = client.search_runs(
        [parent.info.experiment_id],
        f"tags.`{PARENT_RUN_TAG}` = '{parent_run_id}' and attributes.status = 'RUNNING'",
    )
    for run in stale:
        client.set_tag(run.info.run_id, ENDED_BY_TAG, reason)
        client.set_terminated(run.info.run_id, status="KILLED")
    return [run.info.run_id for run in stale]


@contextlib.contextmanager
def stage_run(
    stage: str, params: Any, workspace_cfg: WorkspaceConfig, *, system_metrics: bool = False, tags: dict | None = None
) -> Iterator[mlflow.ActiveRun]:
    """A nested MLflow run for one stage under the parent run of the root flow run that the Prefect ``tags`` name
    (``tasks.links`` hands them in; a top-level run without them).

    The run is active in the calling thread, so ``log_metrics`` / ``log_artifact`` / ``datasets.log_dataset`` log to
    it. An exception marks it FAILED and propagates. ``system_metrics``: MLflow samples CPU, memory, disk, network and
    (with ``nvidia-ml-py``, the ``gpu`` extra) GPU use into ``system/*`` metrics while the run is open.
    """
    import mlflow

    exp_id = configure(workspace_cfg)
    tags = dict(tags or {})
    root = tags.get(ROOT_FLOW_RUN_TAG) or tags.get(FLOW_RUN_TAG)
    parent = pipeline_run_id(workspace_cfg, root_id=root, flow_name=tags.get(FLOW_NAME_TAG))
    with mlflow.start_run(
        experiment_id=exp_id,
        run_name=stage,
        parent_run_id=parent,
        tags={ROLE_TAG: STAGE_ROLE, STAGE_TAG: stage, **tags},
        log_system_metrics=system_metrics or None,  # None: MLflow's own setting (MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING)
    ) as run:
        mlflow.log_params(flatten_params(params))
        yield run


def log_metrics(metrics: Mapping[str, float], step: int | None = None) -> None:
    """Numeric entries of ``metrics`` into the active run (non-numbers are skipped)."""
    import mlflow

    clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if clean:
        mlflow.log_metrics(clean, step=step)


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    """A file or a folder into the active run's artifacts."""
    import mlflow

    path = Path(path)
    if path.is_dir():
        mlflow.log_artifacts(str(path), artifact_path=artifact_path)
    else:
        mlflow.log_artifact(str(path), artifact_path=artifact_path)


def link_pipeline_outputs(outputs: Mapping[str, Any], workspace_cfg: WorkspaceConfig, root: str | None) -> str | None:
    """Record on the parent run of the root flow run ``root`` every stage output it used, computed now or reused
    from the cache: the run that produced it (tag ``t2g.stage_run.<stage>``), Parquet outputs as datasets (context
    ``pipeline``), all references as ``pipeline.json``, and the evaluation and validation reports as artifacts."""
    from mlflow import MlflowClient

    parent = pipeline_run_id(workspace_cfg, create=False, root_id=root)
    if parent is None:
        return None
    client = MlflowClient()
    refs = {name: ref for name, ref in outputs.items() if hasattr(ref, "model_dump")}
    for name, ref in refs.items():
        if ref.run_id:
            client.set_tag(parent, f"{STAGE_RUN_TAG_PREFIX}{name}", ref.run_id)
        if hasattr(ref, "sha256") and hasattr(ref, "schema_name"):
            log_dataset(ref, ref.schema_name, PIPELINE_CONTEXT, run_id=parent)  # datasets by content: spans, ...
        for part in ("feedback", "annotations") if name == "policy_samples" else ():  # its two Parquet outputs
            log_dataset(getattr(ref, part), f"{name}.{part}", PIPELINE_CONTEXT, run_id=parent)
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "pipeline.json"
        summary.write_text(json.dumps({n: r.model_dump(mode="json") for n, r in refs.items()}, indent=2))
        client.log_artifact(parent, str(summary))
    for name, folder, shown in (("evaluate", "report", "evaluation"), ("validate", None, "validation")):
        ref = refs.get(name)
        path = Path(ref.path) / folder if ref is not None and folder else Path(ref.report).parent if ref else None
        if path is not None and path.is_dir():
            client.log_artifacts(parent, str(path), artifact_path=shown)
    return parent


def record_outcome(
    workspace_cfg: WorkspaceConfig, metrics: Mapping[str, float], tags: Mapping[str, str], note: str, root: str | None
) -> str | None:
    """The outcome on the parent run of the root flow run ``root``: headline metrics (comparable across pipeline
    runs in the runs table), tags such as the verdict, and ``note`` as the run's description (markdown on its page)."""
    import time

    from mlflow import MlflowClient
    from mlflow.entities import Metric, RunTag

    parent = pipeline_run_id(workspace_cfg, create=False, root_id=root)
    if parent is None:
        return None
    now = int(time.time() * 1000)
    MlflowClient().log_batch(
        parent,
        metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
        tags=[RunTag(k, str(v)) for k, v in {**tags, NOTE_TAG: note}.items()],
    )
    return parent


def run_link(run_id: str | None, workspace_cfg: WorkspaceConfig, text: str | None = None) -> str:
    """A markdown link to an MLflow run on a tracking server, or the run id in code style for a local store."""
    if not run_id:
        return "–"
    url = run_url(run_id, configure(workspace_cfg), workspace_cfg)
    return f"[{text or run_id[:8]}]({url})" if url.startswith("http") else f"`{run_id}`"
