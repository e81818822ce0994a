"""Where the pipeline logs: the tracking URI, the database created once, the experiment.

- The tracking URI is ``workspace.mlflow_tracking_uri``, else ``$MLFLOW_TRACKING_URI`` (set by ``make up``), else
  ``sqlite:///<workspace>/mlflow.db``. A SQLite database is created and migrated once, under a file lock, before any
  concurrent use (two processes migrating the same new file race); a new one starts as a copy of the last one this
  MLflow version migrated (:mod:`t2g_env.kept_databases`: 0.8 s less per new workspace). The experiment gets an
  explicit artifact location under the workspace (``<workspace>/mlartifacts``), and the kind "machine learning"
  (``MODEL_TRAINING``), so its page in the MLflow UI opens on runs and models, not on the GenAI overview.
- The experiment is pinned: its id and artifact location as first seen are kept in the workspace, and one that
  another has since taken the name of is refused (:func:`pin`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from t2g_mlflow.tags import EXPERIMENT_KIND_TAG

if TYPE_CHECKING:
    from t2g_core.config import WorkspaceConfig

# the experiment kind whose page opens on the runs table and registered models (MLflow 3 opens an experiment without
# one on its GenAI overview: traces and token cost)
MODEL_TRAINING = "custom_model_development"
UI_VIEW = "machine_learning"  # the UI's "Model training" view
PINS = "mlflow-experiments.json"  # <workspace>/: each experiment's id and artifact location as first seen
SERVER_STORE = "mlflow-artifacts:"  # an artifact location in the tracking server's own store (--artifacts-destination)

lock = threading.RLock()  # one thread of this process at a time creates the experiment or the parent run


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
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` across processes (created if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def configure(workspace_cfg: WorkspaceConfig) -> str:
    """Point MLflow at the workspace's tracking store, create it and the experiment once; returns the experiment id
    (:class:`ForeignExperiment` when the experiment is not the one this workspace logs to, :func:`pin`)."""
    import mlflow

    uri = tracking_uri(workspace_cfg)
    root = Path(workspace_cfg.root).resolve()
    _set_tracking_uri(uri)
    with lock, file_lock(root / ".mlflow.lock"):
        with _new_store(uri):  # the first call creates and migrates a database, or finds the kept copy's
            exp = mlflow.get_experiment_by_name(workspace_cfg.mlflow_experiment)
        if exp is None:
            location = None if uri.startswith("http") else (root / "mlartifacts").as_uri()
            created = mlflow.create_experiment(
                workspace_cfg.mlflow_experiment, artifact_location=location, tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING}
            )
            exp = mlflow.get_experiment(created)
        elif EXPERIMENT_KIND_TAG not in exp.tags:
            mlflow.MlflowClient().set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        pin(exp, root, server=uri.startswith("http"))
        return exp.experiment_id


def _new_store(uri: str) -> contextlib.AbstractContextManager:
    """Around the first use of a SQLite store that does not exist yet: it starts as the kept copy, its default
    experiment where MLflow puts a new store's (``./mlruns/0``, resolved) and created now."""
    import time

    from t2g_env.kept_databases import seeded

    path = Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None
    if path is None or path.exists():
        return contextlib.nullcontext()
    default, now = str(Path.cwd() / "mlruns" / "0"), int(time.time() * 1000)
    fields = "artifact_location = ?, creation_time = ?, last_update_time = ?"
    return seeded(
        path,
        "mlflow",
        adapt=lambda db: db.execute(f"UPDATE experiments SET {fields} WHERE experiment_id = 0", (default, now, now)),
    )


def create_store(uri: str) -> None:
    """Create and migrate the tracking store at ``uri`` unless it exists (``make up``, before its server starts)."""
    import mlflow

    with _new_store(uri):
        mlflow.MlflowClient(uri).search_experiments()


class ForeignExperiment(RuntimeError):
    """The experiment of the workspace's name is not the one this workspace logs to; the message says what to do."""


def pin(exp, root: Path, *, server: bool) -> None:
    """Check that ``exp`` is the experiment this workspace logs to: its id and artifact location as first seen are kept
    in ``<workspace>/mlflow-experiments.json``. Whoever reaches a tracking server can rename the experiment and create
    another under its name with an artifact location of their choosing (where the next run would write its reports):
    that one has another id, and is refused. An experiment first seen on a server must keep its artifacts in the
    server's own store (``mlflow-artifacts:``) or in this workspace."""
    from t2g_core.store import read_json, write_text_atomic  # t2g_core.store loads pandas

    path = root / PINS
    pins = read_json(path) if path.exists() else {}
    seen = {"id": exp.experiment_id, "artifact_location": exp.artifact_location}
    known = pins.get(exp.name)
    if known == seen:
        return
    location = exp.artifact_location or ""
    if known is None and (not server or location.startswith(SERVER_STORE) or _under(location, root)):
        write_text_atomic(path, json.dumps({**pins, exp.name: seen}, indent=2))
        return
    expected = (
        f"id {known['id']}, artifact location {known['artifact_location']}"
        if known
        else f"artifacts in the server's store or in {root}"
    )
    raise ForeignExperiment(
        f"MLflow experiment {exp.name!r} (id {exp.experiment_id}, artifact location {location}) is not the one this "
        f"workspace logs to ({expected}): someone may have renamed it and created another under its name. Set "
        "workspace.mlflow_experiment to a new name, or rename them back."
    )


def _under(location: str, root: Path) -> bool:
    from urllib.parse import urlparse

    parsed = urlparse(location)
    return parsed.scheme in ("", "file") and Path(parsed.path).resolve().is_relative_to(root)


def page_url(server: str, experiment_id: str, run_id: str | None = None) -> str:
    """A page of the MLflow UI at ``server`` in its model-training view (runs, models), not the GenAI overview: the
    UI picks the view from the link's ``workflowType`` (then the browser's last choice), not the experiment's kind."""
    run = f"/runs/{run_id}" if run_id else "/runs"
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}{run}?workflowType={UI_VIEW}"


def run_page(run_id: str | None, tracking_uri: str, server: str | None = None) -> str:
    """The run's page on a tracking server (``server``, else the tracking URI when it is one) in the UI's
    model-training view; the store's URI when there is no server."""
    server = server or (tracking_uri if tracking_uri.startswith("http") else None)
    if not run_id or server is None:
        return tracking_uri
    import mlflow

    return page_url(server, mlflow.MlflowClient(tracking_uri).get_run(run_id).info.experiment_id, run_id)


def run_url(run_id: str, experiment_id: str, workspace_cfg: WorkspaceConfig) -> str:
    """The run's page on a tracking server, or how to browse a local store."""
    uri = tracking_uri(workspace_cfg)
    if uri.startswith("http"):
        return page_url(uri, experiment_id, run_id)
    return f"{uri} (experiment {experiment_id}, run {run_id}); browse with: mlflow ui --backend-store-uri {uri}"
