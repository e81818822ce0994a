"""Warm-up task: the policy before PPO, supervised on the training prompts' references (``warmup.enabled``).

Training resumes from its own checkpoints, so the task has no Prefect retries; ``--refresh warmup`` trains again
from the start. The merged policy is an input of PPO and of the evaluation (the baseline), not a registered model.
"""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.orchestration import Layout
from t2g_core.config.stages import WarmupSettings
from t2g_core.stages import warmup
from t2g_core.stages.refs import ArtifactRef, ModelsRef
from tasks.caching import stage_task_options
from tasks.stage import run_stage, stage


@task(name="warmup", **stage_task_options())
def warm_up(
    feedback: ArtifactRef,
    models: ModelsRef,
    settings: WarmupSettings,
    workspace: WorkspaceConfig,
    layout: Layout | None = None,
) -> ModelsRef:
    """The models with ``policy`` replaced by the warmed-up (merged) policy (trained in ``layout``'s processes)."""
    with stage(warm_up, "warmup", workspace, feedback=feedback, models=models, settings=settings) as ctx:
        inputs = {"feedback": feedback, "models": models, "settings": settings}
        return ctx.produced(run_stage(warmup.warm_up, ctx, layout, workspace, **inputs))
