"""Annotation tasks: feedback -> annotations (LLM, code critic or reference critic), and the dataset's versions.

Only the LLM annotator talks to the outside world, so only it gets Prefect retries (the answer cache makes a retry
cost nothing for items already answered). The API key comes from the environment variable the settings name, in the
environment of the process that runs the task (``t2g_env.api_key``): a Prefect Secret block is not used, since any
client of the Prefect API can read one back. The key is handed to t2g_core and never logged or stored.
"""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.stages import AnnotateSettings
from t2g_core.stages import annotate
from t2g_core.stages.refs import ArtifactRef
from t2g_env import api_key
from tasks.caching import stage_task_options
from tasks.stage import stage


def _annotate(feedback: ArtifactRef, settings: AnnotateSettings, workspace: WorkspaceConfig) -> ArtifactRef:
    """One annotations row per feedback item (failures are statuses, never dropped rows)."""
    with stage(_annotate, "annotate", workspace, feedback=feedback, settings=settings) as ctx:
        return ctx.produced(annotate.annotate(feedback, settings, ctx, api_key=api_key(settings)))


annotate_critic = task(name="annotate", **stage_task_options())(_annotate)
annotate_llm = task(name="annotate", **stage_task_options(retries=3))(_annotate)


def annotate_task(settings: AnnotateSettings):
    """The task variant for the configured annotator: retries for the LLM annotator only."""
    return annotate_llm if settings.annotate.annotator == "llm" else annotate_critic


@task(name="unannotated", **stage_task_options())
def unannotated(feedback: ArtifactRef, annotations: ArtifactRef | None, workspace: WorkspaceConfig) -> ArtifactRef:
    """The items of ``feedback`` that ``annotations`` does not cover (every item when there are none)."""
    with stage(unannotated, "unannotated", workspace, feedback=feedback, annotations=annotations) as ctx:
        return ctx.produced(annotate.unannotated(feedback, annotations, ctx))


@task(name="merge-annotations", **stage_task_options())
def merge_annotations(previous: ArtifactRef | None, delta: ArtifactRef, workspace: WorkspaceConfig) -> ArtifactRef:
    """The previous annotations plus the new items' (a newer row for an id replaces the older one)."""
    with stage(merge_annotations, "merge_annotations", workspace, previous=previous, delta=delta) as ctx:
        return ctx.produced(annotate.merge(previous, delta, ctx))
