"""PPO task: feedback prompts + the policy before PPO (+ reward model) -> a trained LoRA policy adapter, registered.

The run folder is keyed by the stage key; a re-run after a crash resumes from the run's own latest checkpoint
(training is not retried by Prefect, it continues, and the log says from which step); ``--refresh ppo`` starts it
afresh. The adapter is registered as ``text2grad-policy`` (alias ``candidate``) with the reward-model version it was
trained against, so ``t2g lineage`` walks back from the policy; evaluation may promote it to ``champion``.
"""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.stages import PPOSettings
from t2g_core.stages.refs import ArtifactRef, ModelsRef, PolicyRef, RewardModelRef
from t2g_env import api_key
from t2g_mlflow.registry import log_adapter_model, log_model_input
from tasks.caching import stage_task_options
from tasks.stage import stage

POLICY_MODEL = "text2grad-policy"


@task(name="ppo", **stage_task_options())
def train_policy(
    feedback: ArtifactRef,
    models: ModelsRef,
    reward_model: RewardModelRef | None,
    settings: PPOSettings,
    workspace: WorkspaceConfig,
) -> PolicyRef:
    """PPO with the configured reward source; returns the adapter, run folder and registered version."""
    from t2g_core.stages import ppo

    used_rm = reward_model if settings.uses_reward_model else None
    with stage(
        train_policy, "ppo", workspace, feedback=feedback, models=models, reward_model=reward_model, settings=settings
    ) as ctx:
        ref = ppo.train(feedback, models, used_rm, settings, ctx, api_key=api_key(settings))
        rm_version = used_rm.version if settings.uses_trained_reward_model and used_rm is not None else None
        if rm_version:
            log_model_input(settings.reward_model.registered_name, rm_version)
        version = log_adapter_model(
            ref.adapter_dir, POLICY_MODEL, params=settings, metrics=ref.metrics, alias="candidate"
        )
        ctx.log(f"policy adapter registered as {POLICY_MODEL} version {version}")
        return ctx.produced(ref.model_copy(update={"version": version, "reward_model_version": rm_version}))
