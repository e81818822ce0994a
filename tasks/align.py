"""Align task: feedback + annotations -> spans (every quoted span placed in its response, with metrics)."""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.stages import AlignSettings
from t2g_core.stages import align as stage_fn
from t2g_core.stages.refs import ArtifactRef, ModelsRef
from tasks.caching import stage_task_options
from tasks.stage import stage


@task(name="align", **stage_task_options())
def align(
    feedback: ArtifactRef,
    annotations: ArtifactRef,
    models: ModelsRef | None,
    settings: AlignSettings,
    workspace: WorkspaceConfig,
) -> ArtifactRef:
    """The spans artifact (metrics in its manifest and in the stage's MLflow run)."""
    with stage(
        align, "align", workspace, feedback=feedback, annotations=annotations, models=models, settings=settings
    ) as ctx:
        tokenizer = models.policy if models is not None else None
        return ctx.produced(stage_fn.align(feedback, annotations, tokenizer, settings, ctx))
