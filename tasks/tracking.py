"""MLflow tracking for Prefect tasks: one parent run per pipeline flow run, one nested run per stage.

- The tracking URI is ``workspace.mlflow_tracking_uri``, else ``$MLFLOW_TRACKING_URI`` (set by ``make up``), else
  ``sqlite:///<workspace>/mlflow.db``. A SQLite database is created and migrated once, under a file lock, before any
  concurrent use (two processes migrating the same new file race; see reference/orchestration.md §5), and the
  experiment gets an explicit artifact location under the workspace (``<workspace>/mlartifacts``).
- The parent run is found again by the tag ``prefect.flow_run_id`` (the *root* flow run), so a Prefect retry of the
  same flow run reuses it instead of creating a duplicate. Stage runs are nested under it and tagged with the Prefect
  flow-run and task-run ids.
- Datasets are logged with ``mlflow.data.from_pandas(source=<parquet path>, digest=<content sha256>)``: the digest is
the
  artifact's content hash, which is how ``t2g lineage`` walks from a consumer back to its producer.
- Adapters are logged as MLflow-3 external LoggedModels (adapter folder as artifacts), registered and aliased. Never
  ``mlflow.transformers.log_model`` on a PEFT model: its base weights come back re-initialised.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import threading
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import mlflow

    from t2g_core.config import WorkspaceConfig
    from t2g_core.store import ArtifactRef

ROLE_TAG = "t2g.role"  # "pipeline" (parent) | "stage"
STAGE_TAG = "t2g.stage"
FLOW_RUN_TAG = "prefect.flow_run_id"  # root flow run on the parent; the stage's own flow run on stage runs
TASK_RUN_TAG = "prefect.task_run_id"
OUTPUT_TAG_PREFIX = "t2g.output."  # t2g.output.<name> = sha256 of an artifact a stage produced
OUTPUT_CONTEXT = "output"  # dataset context of what a stage produced
PRODUCER_TAG = "t2g.producer_run_id"  # dataset-input tag: the run that produced that input
PIPELINE_CONTEXT = "pipeline"  # dataset context on the parent run: a stage output the pipeline used
DIGEST_LEN = 32  # MLflow caps dataset digests at 36 chars: the first 32 hex chars of the sha256
PARAM_MAX = 6000

_lock = threading.RLock()
_ready: set[tuple[str, str]] = set()


# ---------------------------------------------------------------------------------------------------------------
# Setup: tracking URI, database creation, experiment
# ---------------------------------------------------------------------------------------------------------------
def tracking_uri(workspace_cfg: WorkspaceConfig) -> str:
    """Config first, then ``$MLFLOW_TRACKING_URI``, then a SQLite file in the workspace."""
    if workspace_cfg.mlflow_tracking_uri:
        return workspace_cfg.mlflow_tracking_uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{Path(workspace_cfg.root).resolve() / 'mlflow.db'}"


def _set_tracking_uri(uri: str) -> None:
    """Point MLflow at ``uri`` without leaving it in ``$MLFLOW_TRACKING_URI``.

    ``mlflow.set_tracking_uri`` also exports the variable, which ``tracking_uri`` reads as the user's choice (``make
    up``): left there, the next workspace in the same process would log into this one's store (or a stopped server).
    """
    import mlflow

    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def configure(workspace_cfg: WorkspaceConfig) -> str:
    """Point MLflow at the workspace's tracking store, create it and the experiment once; returns the experiment id."""
    import mlflow

    uri = tracking_uri(workspace_cfg)
    root = Path(workspace_cfg.root).resolve()
    _set_tracking_uri(uri)
    key = (uri, workspace_cfg.mlflow_experiment)
    with _lock, _file_lock(root / ".mlflow.lock"):
        exp = mlflow.get_experiment_by_name(workspace_cfg.mlflow_experiment)  # first call creates + migrates the DB
        if exp is None:
            location = None if uri.startswith("http") else (root / "mlartifacts").as_uri()
            exp_id = mlflow.create_experiment(workspace_cfg.mlflow_experiment, artifact_location=location)
        else:
            exp_id = exp.experiment_id
        _ready.add(key)
    return exp_id


# ---------------------------------------------------------------------------------------------------------------
# Prefect context
# ---------------------------------------------------------------------------------------------------------------
def prefect_tags() -> dict[str, str]:
    """Tags linking an MLflow run to the Prefect flow run and task run it belongs to (empty outside Prefect)."""
    from prefect.runtime import deployment, flow_run, task_run

    tags: dict[str, str] = {}
    for name, value in {
        FLOW_RUN_TAG: flow_run.id,
        "prefect.flow_run_name": flow_run.name,
        "prefect.flow_name": flow_run.flow_name,
        "prefect.root_flow_run_id": flow_run.root_flow_run_id,
        "prefect.deployment": deployment.name,
        TASK_RUN_TAG: task_run.id,
        "prefect.task_run_name": task_run.name,
        "prefect.flow_run_url": flow_run.ui_url,
    }.items():
        if value and not (name == "prefect.flow_run_url" and not str(value).startswith("http")):
            tags[name] = str(value)  # without PREFECT_UI_URL (ephemeral API) Prefect's URL is "None/flow-runs/..."
    return tags


def _root_flow_run() -> tuple[str | None, str | None]:
    from prefect.runtime import flow_run

    root = flow_run.root_flow_run_id or flow_run.id
    return (str(root) if root else None), flow_run.flow_name


def _in_prefect_run() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


# ---------------------------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------------------------
def pipeline_run_id(
    workspace_cfg: WorkspaceConfig, *, create: bool = True, root_id: str | None = None, flow_name: str | None = None
) -> str | None:
    """The parent run of the (current) root Prefect flow run, found by tag (so retries reuse it) or created."""
    from mlflow import MlflowClient

    exp_id = configure(workspace_cfg)
    if root_id is None:
        root_id, flow_name = _root_flow_run()
    if root_id is None:
        return None
    client = MlflowClient()
    flt = f"tags.`{FLOW_RUN_TAG}` = '{root_id}' and tags.`{ROLE_TAG}` = 'pipeline'"
    with _lock, _file_lock(Path(workspace_cfg.root).resolve() / ".mlflow-parent.lock"):
        found = client.search_runs([exp_id], filter_string=flt, max_results=1, order_by=["attributes.start_time ASC"])
        if found:
            run = found[0]
            if run.info.status != "RUNNING":
                client.update_run(run.info.run_id, status="RUNNING")
            return run.info.run_id
        if not create:
            return None
        tags = {ROLE_TAG: "pipeline", FLOW_RUN_TAG: root_id, "prefect.flow_name": str(flow_name or "")}
        run = client.create_run(exp_id, run_name=f"{flow_name or 'pipeline'}-{root_id[:8]}", tags=tags)
        return run.info.run_id


def end_pipeline_run(flow_run_id: str, workspace_cfg: WorkspaceConfig, status: str = "FINISHED") -> str | None:
    """Mark the parent run of ``flow_run_id`` as finished or failed (a later Prefect retry reopens it)."""
    from mlflow import MlflowClient

    exp_id = configure(workspace_cfg)
    client = MlflowClient()
    flt = f"tags.`{FLOW_RUN_TAG}` = '{flow_run_id}' and tags.`{ROLE_TAG}` = 'pipeline'"
    for run in client.search_runs([exp_id], filter_string=flt, max_results=5):
        client.set_terminated(run.info.run_id, status=status)
        return run.info.run_id
    return None


def close_stale_stage_runs(parent_run_id: str, reason: str) -> list[str]:
    """Stage runs under ``parent_run_id`` still RUNNING (their process was killed): mark them KILLED with ``reason``
    (tag ``t2g.ended_by``). Called when a flow run starts again (a Retry); returns the runs closed."""
    from mlflow import MlflowClient

    client = MlflowClient()
    parent = client.get_run(parent_run_id)
    stale = client.search_runs(
        [parent.info.experiment_id],
        f"tags.`mlflow.parentRunId` = '{parent_run_id}' and attributes.status = 'RUNNING'",
    )
    for run in stale:
        client.set_tag(run.info.run_id, "t2g.ended_by", reason)
        client.set_terminated(run.info.run_id, status="KILLED")
    return [run.info.run_id for run in stale]


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


@contextlib.contextmanager
def stage_run(
    stage: str, params: Mapping[str, Any] | Any, workspace_cfg: WorkspaceConfig, *, system_metrics: bool = False
) -> Iterator[mlflow.ActiveRun]:
    """A nested MLflow run for one stage under the pipeline's parent run (top level outside a Prefect flow).

    The run is active in the calling thread, so ``log_metrics`` / ``log_artifact`` / ``log_dataset`` below log to it.
    An exception marks it FAILED and propagates. ``system_metrics``: MLflow samples CPU, memory, disk, network and
    (with ``nvidia-ml-py``, the ``gpu`` extra) GPU use into ``system/*`` metrics while the run is open.
    """
    import mlflow

    exp_id = configure(workspace_cfg)
    parent = pipeline_run_id(workspace_cfg)
    tags = {ROLE_TAG: "stage", STAGE_TAG: stage, **prefect_tags()}
    with mlflow.start_run(
        experiment_id=exp_id,
        run_name=stage,
        parent_run_id=parent,
        tags=tags,
        log_system_metrics=system_metrics or None,  # None: MLflow's own setting (MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING)
    ) as run:
        mlflow.log_params(flatten_params(params))
        _link_from_prefect(stage, run.info.run_id, exp_id, workspace_cfg)
        yield run


@contextlib.contextmanager
def task_run_stage(task_run_id: str, workspace_cfg: WorkspaceConfig) -> Iterator[mlflow.ActiveRun | None]:
    """Re-open the stage run a Prefect task run created (found by tag), e.g. from a task hook; None if it made none
    (a cached task run executes nothing, so it has no stage run of its own)."""
    import mlflow

    exp_id = configure(workspace_cfg)
    runs = mlflow.MlflowClient().search_runs(
        [exp_id],
        f"tags.`{TASK_RUN_TAG}` = '{task_run_id}' and tags.`{ROLE_TAG}` = 'stage'",
        max_results=1,
        order_by=["attributes.start_time DESC"],
    )
    if not runs:
        yield None
        return
    status = runs[0].info.status
    with mlflow.start_run(run_id=runs[0].info.run_id) as run:
        yield run
    mlflow.MlflowClient().set_terminated(run.info.run_id, status=status)


def run_url(run_id: str, experiment_id: str, workspace_cfg: WorkspaceConfig) -> str:
    uri = tracking_uri(workspace_cfg)
    if uri.startswith("http"):
        return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
    return f"{uri} (experiment {experiment_id}, run {run_id}); browse with: mlflow ui --backend-store-uri {uri}"


def _link_from_prefect(stage: str, run_id: str, exp_id: str, workspace_cfg: WorkspaceConfig) -> None:
    """A Prefect link artifact on the flow run pointing at the stage's MLflow run."""
    if not _in_prefect_run():
        return
    from prefect.artifacts import create_link_artifact, create_markdown_artifact

    url = run_url(run_id, exp_id, workspace_cfg)
    key = f"mlflow-{stage}".lower().replace("_", "-")
    if url.startswith("http"):
        create_link_artifact(key=key, link=url, link_text=f"MLflow run of {stage}")
    else:
        create_markdown_artifact(key=key, markdown=f"MLflow run of **{stage}**: `{url}`")


# ---------------------------------------------------------------------------------------------------------------
# Logging into the active stage run
# ---------------------------------------------------------------------------------------------------------------
def _as_ref(ref: ArtifactRef | Mapping[str, Any]) -> ArtifactRef:
    from t2g_core.store import ArtifactRef

    return ref if isinstance(ref, ArtifactRef) else ArtifactRef.model_validate(dict(ref))


def log_dataset(ref: ArtifactRef | Mapping[str, Any], name: str, context: str, run_id: str | None = None) -> None:
    """Log an artifact's Parquet as an MLflow dataset input of ``run_id`` (default: the active run): source = its
    path, digest = its content sha256, tag ``t2g.producer_run_id`` = the run that produced it (when known).

    ``context``: "annotation" | "training" | "eval" for inputs; "output" records what the stage produced
    (also set as the run tag ``t2g.output.<name>``), which is what ``t2g lineage`` follows.
    """
    import mlflow
    import pandas as pd
    from mlflow.entities import DatasetInput, InputTag

    ref = _as_ref(ref)
    run_id = run_id or mlflow.active_run().info.run_id
    df = pd.read_parquet(ref.data_path)
    for col in df.columns:  # list/dict cells break MLflow's schema inference; lineage needs the source, not types
        if df[col].map(lambda v: isinstance(v, (list, dict)) or hasattr(v, "tolist")).any():
            df[col] = df[col].map(lambda v: json.dumps(v.tolist() if hasattr(v, "tolist") else v, default=str))
    tags = {
        "mlflow.data.context": context,
        "sha256": ref.sha256,
        "artifact_key": ref.key,
        "schema": ref.schema_name,
        "n_rows": str(ref.n_rows),
    }
    if ref.run_id and context != OUTPUT_CONTEXT:
        tags[PRODUCER_TAG] = ref.run_id  # lineage follows this exact run (see t2g_cli/lineage.py)
    with warnings.catch_warnings():  # "source can be interpreted in multiple ways" (both are the local file) and
        warnings.simplefilter("ignore", UserWarning)  # schema-inference hints about integer columns
        ds = mlflow.data.from_pandas(df, source=ref.data_path, name=name, digest=ref.sha256[:DIGEST_LEN])
    client = mlflow.MlflowClient()
    client.log_inputs(
        run_id, datasets=[DatasetInput(ds._to_mlflow_entity(), [InputTag(k, v) for k, v in tags.items()])]
    )
    if context == OUTPUT_CONTEXT:
        client.set_tag(run_id, f"{OUTPUT_TAG_PREFIX}{name}", ref.sha256)


def log_output(ref: ArtifactRef | Mapping[str, Any], name: str) -> None:
    """Record an artifact the active stage run produced (``log_dataset(ref, name, "output")``)."""
    log_dataset(ref, name, "output")


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


def log_adapter_model(
    adapter_dir: str | Path,
    registered_name: str,
    params: Mapping[str, Any] | None = None,
    metrics: Mapping[str, float] | None = None,
    alias: str | None = "candidate",
    model_type: str = "peft-adapter",
) -> str:
    """Log a model folder (a PEFT adapter, or a span tagger's folder: ``model_type``) as an external LoggedModel of
    the active run, register it and set ``alias``.

    Returns the registered model version. Load it back with
    ``PeftModel.from_pretrained(base, mlflow.artifacts.download_artifacts(f"models:/{name}@{alias}"))``.
    """
    import mlflow
    from mlflow import MlflowClient

    active = mlflow.active_run()
    source_run = active.info.run_id if active else None
    lm = mlflow.create_external_model(
        name=registered_name,
        source_run_id=source_run,
        params=flatten_params(params or {}),
        tags=prefect_tags(),
        model_type=model_type,
    )
    client = MlflowClient()
    client.log_model_artifacts(lm.model_id, str(adapter_dir))
    for key, value in (metrics or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            mlflow.log_metric(key, float(value), model_id=lm.model_id)
    mv = mlflow.register_model(f"models:/{lm.model_id}", registered_name, tags={"source_run_id": source_run or ""})
    if alias:
        client.set_registered_model_alias(registered_name, alias, mv.version)
    if active:
        mlflow.set_tag(f"t2g.model.{registered_name}", str(mv.version))
    return str(mv.version)


def log_model_input(registered_name: str, version: str | int) -> None:
    """Record that the active run consumed a registered model version (e.g. PPO uses the reward model)."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import LoggedModelInput

    mv = MlflowClient().get_model_version(registered_name, str(version))
    model_id = mv.model_id or (mv.source.removeprefix("models:/") if mv.source.startswith("models:/m-") else None)
    if model_id:
        mlflow.log_input(model=LoggedModelInput(model_id))
    mlflow.set_tag(f"t2g.uses.{registered_name}", str(version))


def link_pipeline_outputs(outputs: Mapping[str, Any], workspace_cfg: WorkspaceConfig) -> str | None:
    """Record on the pipeline's parent run every stage output it used, computed now or reused from the cache: the
    run that produced it (tag ``t2g.stage_run.<stage>``), Parquet outputs as datasets (context ``pipeline``), all
    references as ``pipeline.json``, and the evaluation and validation reports as artifacts."""
    import tempfile

    from mlflow import MlflowClient

    parent = pipeline_run_id(workspace_cfg, create=False)
    if parent is None:
        return None
    client = MlflowClient()
    refs = {name: ref for name, ref in outputs.items() if hasattr(ref, "model_dump")}
    for name, ref in refs.items():
        if ref.run_id:
            client.set_tag(parent, f"t2g.stage_run.{name}", ref.run_id)
        if hasattr(ref, "sha256") and hasattr(ref, "schema_name"):
            log_dataset(ref, name, PIPELINE_CONTEXT, run_id=parent)
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "pipeline.json"
        summary.write_text(json.dumps({n: r.model_dump(mode="json") for n, r in refs.items()}, indent=2))
        client.log_artifact(parent, str(summary))
    for name, folder in (("evaluation", "report"), ("validation", None)):
        ref = refs.get(name)
        path = Path(ref.path) / folder if ref is not None and folder else Path(ref.report).parent if ref else None
        if path is not None and path.is_dir():
            client.log_artifacts(parent, str(path), artifact_path=name)
    return parent


METRIC_TAG = "t2g.metric."


def promote_if_better(name: str, version: str, metric: str, value: float | None) -> bool:
    """Tag the version with its metric; move alias ``champion`` to it when it beats the champion's (or none exists).

    ``value`` is oriented so that higher is better; None records that the version may not be promoted (its
    evaluation verdict was not "better"), and it is not.
    """
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    tag = METRIC_TAG + re.sub(r"[^\w.\- /:]", "_", metric)  # pass@1 -> pass_1 (tag names allow no '@')
    client.set_model_version_tag(name, version, tag, "none" if value is None else str(value))
    if value is None:
        return False
    try:
        champion = client.get_model_version_by_alias(name, "champion")
        best = _as_float(champion.tags.get(tag))
    except MlflowException:
        champion, best = None, -math.inf
    if champion is None or value > best:
        client.set_registered_model_alias(name, "champion", version)
        return True
    return False


def _as_float(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "none") else -math.inf
    except ValueError:
        return -math.inf


class MlflowTracker:
    """The t2g_core tracker protocol over one MLflow run, thread-safe (explicit run id, no fluent state)."""

    def __init__(self, run_id: str | None = None):
        import mlflow

        if run_id is None:
            active = mlflow.active_run()
            if active is None:
                raise RuntimeError("MlflowTracker() needs an active MLflow run (use it inside stage_run) or a run_id")
            run_id = active.info.run_id
        self.run_id = run_id

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        import time

        from mlflow import MlflowClient
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        batch = [
            Metric(k, float(v), ts, step or 0)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        if batch:
            MlflowClient().log_batch(self.run_id, metrics=batch)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        from mlflow import MlflowClient

        path = Path(path)
        if path.is_dir():
            MlflowClient().log_artifacts(self.run_id, str(path), artifact_path=artifact_path)
        else:
            MlflowClient().log_artifact(self.run_id, str(path), artifact_path=artifact_path)

    def log_input(self, ref: ArtifactRef, name: str, context: str) -> None:
        """A dataset the stage read (tagged with the run that produced it, when known)."""
        log_dataset(ref, name, context, run_id=self.run_id)

    def log_output(self, ref: ArtifactRef, name: str) -> None:
        log_dataset(ref, name, OUTPUT_CONTEXT, run_id=self.run_id)

    def log_params(self, params: Mapping[str, str]) -> None:
        from mlflow import MlflowClient
        from mlflow.entities import Param

        MlflowClient().log_batch(self.run_id, params=[Param(k, str(v)[:PARAM_MAX]) for k, v in params.items()])
