"""Annotation tasks: feedback -> annotations (LLM, code critic or reference critic), and the dataset's versions.

Only the LLM annotator talks to the outside world, so only it gets Prefect retries (the answer cache makes a retry
cost nothing for items already answered). The API key comes from a Prefect Secret block (``api_key_secret``) or the
environment variable named in config; it is handed to t2g_core and never logged or stored.
"""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.stages import AnnotateSettings
from t2g_core.stages.refs import ArtifactRef
from t2g_env import api_key
from tasks.caching import stage_task_options
from tasks.stage import stage


def annotator_key(settings: AnnotateSettings) -> str | None:
    """The LLM annotator's key: from the Prefect Secret block ``annotate.api_key_secret`` when it names one, else from
    the environment variable the settings name (``t2g_env.api_key``); None for the programmatic critics."""
    if settings.api_key_env is None:
        return None
    if settings.annotate.api_key_secret:
        from prefect.blocks.system import Secret

        return Secret.load(settings.annotate.api_key_secret).get()
    return api_key(settings)


def _annotate(feedback: ArtifactRef, settings: AnnotateSettings, workspace: WorkspaceConfig) -> ArtifactRef:
    """One annotations row per feedback item (failures are statuses, never dropped rows)."""
    from t2g_core.stages import annotate

    with stage(_annotate, "annotate", workspace, feedback=feedback, settings=settings) as ctx:
        return ctx.produced(annotate.annotate(feedback, settings, ctx, api_key=annotator_key(settings)))


annotate_critic = task(name="annotate", **stage_task_options())(_annotate)
annotate_llm = task(name="annotate-llm", **stage_task_options(retries=3))(_annotate)


def annotate_task(settings: AnnotateSettings):
    """The task variant for the configured annotator: retries for the LLM annotator only."""
    return annotate_llm if settings.annotate.annotator == "llm" else annotate_critic


@task(name="unannotated", **stage_task_options())
def unannotated(feedback: ArtifactRef, annotations: ArtifactRef | None, workspace: WorkspaceConfig) -> ArtifactRef:
    """The items of ``feedback`` that ``annotations`` does not cover (every item when there are none)."""
    from t2g_core.stages import annotate

    with stage(unannotated, "unannotated", workspace, feedback=feedback, annotations=annotations) as ctx:
        return ctx.produced(annotate.unannotated(feedback, annotations, ctx))


@task(name="merge-annotations", **stage_task_options())
def merge_annotations(previous: ArtifactRef | None, delta: ArtifactRef, workspace: WorkspaceConfig) -> ArtifactRef:
    """The previous annotations plus the new items' (a newer row for an id replaces the older one)."""
    from t2g_core.stages import annotate

    with stage(merge_annotations, "merge_annotations", workspace, previous=previous, delta=delta) as ctx:
        return ctx.produced(annotate.merge(previous, delta, ctx))
