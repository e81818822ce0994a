"""Prefect and MLflow pointing at each other: Prefect's ids as tags on MLflow runs (``t2g_mlflow`` is handed them
here), a link to the run in Prefect. Outside a Prefect run (``.fn()``, the command line) the tags are empty, a stage
run is a top-level run and no artifact is created."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from t2g_core.config import WorkspaceConfig
from t2g_mlflow import runs
from t2g_mlflow.experiment import run_url
from t2g_mlflow.tags import (
    DEPLOYMENT_TAG,
    FLOW_NAME_TAG,
    FLOW_RUN_NAME_TAG,
    FLOW_RUN_TAG,
    FLOW_RUN_URL_TAG,
    ROOT_FLOW_RUN_TAG,
    TASK_RUN_NAME_TAG,
    TASK_RUN_TAG,
)


def prefect_tags() -> dict[str, str]:
    """Tags linking an MLflow run to the Prefect flow run and task run it belongs to (empty outside Prefect)."""
    from prefect.runtime import deployment, flow_run, task_run

    tags: dict[str, str] = {}
    for name, value in {
        FLOW_RUN_TAG: flow_run.id,
        FLOW_RUN_NAME_TAG: flow_run.name,
        FLOW_NAME_TAG: flow_run.flow_name,
        ROOT_FLOW_RUN_TAG: flow_run.root_flow_run_id,
        DEPLOYMENT_TAG: deployment.name,
        TASK_RUN_TAG: task_run.id,
        TASK_RUN_NAME_TAG: task_run.name,
        FLOW_RUN_URL_TAG: flow_run_url(flow_run.id) if flow_run.id else None,
    }.items():
        if value:
            tags[name] = str(value)
    return tags


def prefect_ui_url() -> str | None:
    """The Prefect UI that keeps this run's pages (a persistent server's: `make up`, a deployment's), or None: an
    ephemeral API has no UI, and the temporary API server of `t2g run` has none either and ends with the command
    (``t2g_cli.runtime`` sets ``PREFECT_UI_URL`` empty for it)."""
    from prefect.settings import PREFECT_UI_URL

    url = PREFECT_UI_URL.value()
    return url if url and url.startswith("http") else None


def flow_run_url(flow_run_id: Any) -> str | None:
    """The flow run's page in the Prefect UI that keeps it, or None (:func:`prefect_ui_url`)."""
    from prefect.utilities.urls import url_for

    return url_for("flow-run", obj_id=flow_run_id) if prefect_ui_url() else None


def root_flow_run_id() -> str | None:
    """The id of the root Prefect flow run (the pipeline's: its MLflow parent run is tagged with it); None outside."""
    from prefect.runtime import flow_run

    root = flow_run.root_flow_run_id or flow_run.id
    return str(root) if root else None


def in_prefect_run() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def link_from_prefect(stage: str, url: str) -> None:
    """A Prefect link artifact on the flow run pointing at the stage's MLflow run (a markdown one for a local store)."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact

    key = f"mlflow-{stage}".lower().replace("_", "-")
    if url.startswith("http"):
        create_link_artifact(key=key, link=url, link_text=f"MLflow run of {stage}")
    else:
        create_markdown_artifact(key=key, markdown=f"MLflow run of **{stage}**: `{url}`")


@contextlib.contextmanager
def stage_run(
    stage: str, params: Any, workspace_cfg: WorkspaceConfig, *, system_metrics: bool = False
) -> Iterator[Any]:
    """:func:`t2g_mlflow.runs.stage_run` (the active MLflow run) with this Prefect run's ids, so nested under the
    pipeline's parent run, and linked from the Prefect flow run."""
    with runs.stage_run(stage, params, workspace_cfg, system_metrics=system_metrics, tags=prefect_tags()) as run:
        if in_prefect_run():
            link_from_prefect(stage, run_url(run.info.run_id, run.info.experiment_id, workspace_cfg))
        yield run
