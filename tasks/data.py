"""Data tasks: the feedback artifact, the base models, and the versions of the feedback and annotations datasets.

Version pointers ``<workspace>/artifacts/{feedback,annotations}/LATEST.json`` name the current version of each
dataset the inbox extends (an ``ArtifactRef`` dict plus ``version``; the annotations pointer also names the
feedback version it covers). The pipeline sets them when it creates the first version; re-annotation moves both.
"""

from __future__ import annotations

import json

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.stages import FeedbackSettings, ModelsSettings
from t2g_core.stages.refs import ArtifactRef, ModelsRef, SourceRef
from tasks.caching import stage_task_options
from tasks.stage import stage

LATEST = "LATEST.json"


@task(name="feedback", **stage_task_options())
def materialise_feedback(source: SourceRef, settings: FeedbackSettings, workspace: WorkspaceConfig) -> ArtifactRef:
    """Demo data, a dataset adapter or a user's file -> an immutable, validated ``feedback`` artifact."""
    from t2g_core.stages import feedback

    with stage(materialise_feedback, "feedback", workspace, source=source, settings=settings) as ctx:
        return ctx.produced(feedback.materialise(source, settings, ctx))


@task(name="build-models", **stage_task_options())
def build_models(feedback: ArtifactRef, settings: ModelsSettings, workspace: WorkspaceConfig) -> ModelsRef:
    """The tiny base and warm-started policy for the feedback's task (built once), or the named models."""
    from t2g_core.stages import models

    with stage(build_models, "build_models", workspace, feedback=feedback, settings=settings) as ctx:
        return ctx.produced(models.build(feedback, settings, ctx))


@task(name="append-feedback", **stage_task_options())
def append_feedback(new_file: ArtifactRef, current: ArtifactRef | None, workspace: WorkspaceConfig) -> ArtifactRef:
    """The next version of the feedback dataset: ``current`` plus the items of ``new_file`` it lacks."""
    from t2g_core.stages import feedback

    with stage(append_feedback, "append_feedback", workspace, new_file=new_file, current=current) as ctx:
        version, _delta = feedback.append(new_file, current, ctx)
        return ctx.produced(version)


# --------------------------------------------------------------------------------------------- version pointers
def _pointer(workspace: WorkspaceConfig, dataset: str):
    from t2g_core.workspace import Workspace

    return Workspace.at(workspace.root).artifacts / dataset / LATEST


def _read_pointer(workspace: WorkspaceConfig, dataset: str) -> dict | None:
    path = _pointer(workspace, dataset)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def latest(workspace: WorkspaceConfig, dataset: str) -> ArtifactRef | None:
    """The current version of ``dataset`` (``feedback`` or ``annotations``), or None."""
    pointer = _read_pointer(workspace, dataset)
    return ArtifactRef.model_validate(pointer) if pointer else None


def latest_version(workspace: WorkspaceConfig) -> ArtifactRef:
    """The feedback dataset's latest version (``data.source: latest``); a clear error when there is none yet."""
    found = latest(workspace, "feedback")
    if found is None:
        raise FileNotFoundError(
            f"data.source=latest: the workspace {workspace.root} has no feedback dataset version yet (a pipeline run "
            "makes version 1; the inbox re-annotation appends the next ones)"
        )
    return found


def annotations_covering(workspace: WorkspaceConfig, feedback: ArtifactRef) -> ArtifactRef | None:
    """The latest annotations when they cover exactly ``feedback`` (what re-annotation left), else None."""
    pointer = _read_pointer(workspace, "annotations")
    if pointer is None or pointer.get("feedback_sha256") != feedback.sha256:
        return None
    return ArtifactRef.model_validate(pointer)


def latest_feedback(workspace: WorkspaceConfig) -> ArtifactRef | None:
    return latest(workspace, "feedback")


def latest_annotations(workspace: WorkspaceConfig) -> ArtifactRef | None:
    return latest(workspace, "annotations")


def described(workspace: WorkspaceConfig, feedback: ArtifactRef) -> str:
    """``feedback version 2 (144 rows)`` when ``feedback`` is the dataset's current version, else its content hash."""
    pointer = _read_pointer(workspace, "feedback")
    if pointer and pointer["sha256"] == feedback.sha256:
        return f"feedback version {pointer['version']} ({feedback.n_rows} rows)"
    return f"feedback {feedback.sha256[:12]} ({feedback.n_rows} rows)"


def version_of(workspace: WorkspaceConfig, dataset: str) -> int:
    return int((_read_pointer(workspace, dataset) or {}).get("version", 0))


def _write_pointer(workspace: WorkspaceConfig, dataset: str, ref: ArtifactRef, **extra) -> None:
    from t2g_core.store import write_text_atomic

    write_text_atomic(_pointer(workspace, dataset), json.dumps({**ref.to_dict(), **extra}, indent=2))


def advance_versions(workspace: WorkspaceConfig, feedback: ArtifactRef, annotations: ArtifactRef) -> int:
    """Move both pointers to ``feedback`` and the ``annotations`` covering it; returns the feedback version (a new
    number only when the content changed)."""
    current = _read_pointer(workspace, "feedback")
    version = (
        int(current["version"])
        if current and current["sha256"] == feedback.sha256
        else version_of(workspace, "feedback") + 1
    )
    _write_pointer(workspace, "feedback", feedback, version=version)
    _write_pointer(workspace, "annotations", annotations, version=version, feedback_sha256=feedback.sha256)
    return version


@task(name="record-dataset-versions", timeout_seconds=60)
def record_first_versions(feedback: ArtifactRef, annotations: ArtifactRef, workspace: WorkspaceConfig) -> int:
    """The pipeline's annotated feedback becomes version 1 of both datasets when the workspace has none yet, and the
    annotations pointer follows when it annotated the current feedback version; returns the feedback version."""
    current = latest_feedback(workspace)
    if current is None or current.sha256 == feedback.sha256:
        return advance_versions(workspace, feedback, annotations)
    return version_of(workspace, "feedback")
