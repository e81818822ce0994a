"""Data tasks: the feedback artifact, the base models, the feedback dataset's next version, both datasets' first."""

from __future__ import annotations

from prefect import task

from t2g_core import datasets
from t2g_core.config import WorkspaceConfig
from t2g_core.config.stages import FeedbackSettings, ModelsSettings
from t2g_core.stages import feedback, models
from t2g_core.stages.refs import ArtifactRef, ModelsRef, SourceRef
from tasks.caching import stage_task_options
from tasks.stage import stage


@task(name="feedback", **stage_task_options())
def materialise_feedback(source: SourceRef, settings: FeedbackSettings, workspace: WorkspaceConfig) -> ArtifactRef:
    """Demo data, a dataset adapter or a user's file -> an immutable, validated ``feedback`` artifact."""
    with stage(materialise_feedback, "feedback", workspace, source=source, settings=settings) as ctx:
        return ctx.produced(feedback.materialise(source, settings, ctx))


@task(name="models", **stage_task_options())
def build_models(feedback: ArtifactRef, settings: ModelsSettings, workspace: WorkspaceConfig) -> ModelsRef:
    """The tiny base and warm-started policy for the feedback's task (built once), or the named models."""
    with stage(build_models, "models", workspace, feedback=feedback, settings=settings) as ctx:
        return ctx.produced(models.build(feedback, settings, ctx))


@task(name="append-feedback", **stage_task_options())
def append_feedback(new_file: ArtifactRef, current: ArtifactRef | None, workspace: WorkspaceConfig) -> ArtifactRef:
    """The next version of the feedback dataset: ``current`` plus the items of ``new_file`` it lacks."""
    with stage(append_feedback, "append_feedback", workspace, new_file=new_file, current=current) as ctx:
        version, _delta = feedback.append(new_file, current, ctx)
        return ctx.produced(version)


@task(name="record-dataset-versions", timeout_seconds=60)
def record_first_versions(feedback: ArtifactRef, annotations: ArtifactRef, workspace: WorkspaceConfig) -> int:
    """The pipeline's annotated feedback as the datasets' first version (``t2g_core.datasets``); returns the feedback
    version."""
    return datasets.record_first_versions(workspace, feedback, annotations)
