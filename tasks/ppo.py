"""PPO task: feedback prompts + the policy before PPO (+ reward model) -> a trained LoRA policy adapter, registered.

The run folder is keyed by the stage key; a re-run after a crash resumes from the run's own latest checkpoint
(training is not retried by Prefect, it continues, and the log says from which step); ``--refresh ppo`` starts it
afresh. The adapter is registered as ``text2grad-policy`` (alias ``candidate``) with the reward-model version it was
trained against, so ``t2g lineage`` walks back from the policy; evaluation may promote it to ``champion``. Each
reward model the critique loop refreshed is registered as a version of the reward model (alias ``refreshed`` on the
last), logged by this PPO run, with the audit that triggered it; the alarm shows as the run's ``ppo-critique-loop``
progress artifact.
"""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.stages import PPOSettings
from t2g_core.stages import ppo
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

    used_rm = reward_model if settings.uses_reward_model else None
    with stage(
        train_policy, "ppo", workspace, feedback=feedback, models=models, reward_model=reward_model, settings=settings
    ) as ctx:
        ref = ppo.train(feedback, models, used_rm, settings, ctx, api_key=api_key(settings))
        rm_version = used_rm.version if settings.uses_trained_reward_model and used_rm is not None else None
        if rm_version:
            log_model_input(settings.reward_model.registered_name, rm_version)
        refreshed = [register_refreshed(m, settings, rm_version) for m in ref.reward_models]
        version = log_adapter_model(
            ref.adapter_dir, POLICY_MODEL, params=settings, metrics=ref.metrics, alias="candidate"
        )
        ctx.log(f"policy adapter registered as {POLICY_MODEL} version {version}")
        update = {"version": version, "reward_model_version": rm_version, "reward_models": refreshed}
        return ctx.produced(ref.model_copy(update=update))


def register_refreshed(model: dict, settings: PPOSettings, started_from: str | None) -> dict:
    """Register one reward model the critique loop refreshed (a version of the reward model, logged by this run)."""
    name = settings.reward_model.registered_name
    params = {"critique_loop_round": model["round"], "ppo_step": model["step"], "refreshed_from_version": started_from}
    version = log_adapter_model(
        model["folder"], name, params, model["metrics"], alias="refreshed", model_type="span-tagger"
    )
    return {**model, "version": version}
