"""PPO task: feedback prompts + the policy before PPO (+ reward model) -> a trained LoRA policy adapter, registered.

The run folder is keyed by the stage key; a re-run after a crash resumes from the run's own latest checkpoint
(training is not retried by Prefect, it continues, and the log says from which step); ``--refresh ppo`` starts it
afresh. The adapter is registered as ``text2grad-policy`` (alias ``candidate``) with the reward-model version it was
trained against, so ``t2g lineage`` walks back from the policy; evaluation may promote it to ``champion``.
"""

from __future__ import annotations

import os

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.stages.refs import ArtifactRef, ModelsRef, PolicyRef, RewardModelRef
from t2g_core.stages.settings import PPOSettings
from tasks import tracking
from tasks.caching import stage_task_options
from tasks.stage import stage

POLICY_MODEL = "text2grad-policy"


def endpoint_api_key(settings: PPOSettings) -> str | None:
    """The HTTP reward source's key, from the environment variable the config names (never logged or stored)."""
    if settings.ppo.reward_source != "endpoint":
        return None
    return os.environ.get(settings.reward_model.endpoint.api_key_env)


@task(name="ppo", **stage_task_options(24 * 3600))
def train_policy(
    feedback: ArtifactRef,
    models: ModelsRef,
    reward_model: RewardModelRef | None,
    settings: PPOSettings,
    workspace: WorkspaceConfig,
) -> PolicyRef:
    """PPO with the configured reward source; returns the adapter, run folder and registered version."""
    from t2g_core.stages import ppo

    used_rm = reward_model if settings.ppo.reward_source == "reward_model" else None
    with stage(
        train_policy, "ppo", workspace, feedback=feedback, models=models, reward_model=reward_model, settings=settings
    ) as ctx:
        ref = ppo.train(feedback, models, used_rm, settings, ctx, api_key=endpoint_api_key(settings))
        rm_version = used_rm.version if used_rm is not None and not settings.ppo.reward_model_path else None
        if rm_version:
            tracking.log_model_input(settings.reward_model.registered_name, rm_version)
        version = tracking.log_adapter_model(
            ref.adapter_dir, POLICY_MODEL, params=settings, metrics=ref.metrics, alias="candidate"
        )
        ctx.log(f"policy adapter registered as {POLICY_MODEL} version {version}")
        return ctx.produced(ref.model_copy(update={"version": version, "reward_model_version": rm_version}))
