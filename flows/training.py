"""Policy training: span-reward PPO from the warm-started policy."""

from __future__ import annotations

from prefect import flow

from flows.stages import is_ref, not_built, stage_task
from t2g_core.config import PipelineConfig
from tasks.caching import cached


@flow(name="train-policy")
def train_policy(config: PipelineConfig, data: dict, reward_model: dict, forced: set[str] | None = None) -> dict:
    """PPO on the feedback prompts with the configured reward source; returns the policy adapter reference."""
    ppo = stage_task("ppo", "train_policy")
    if ppo is None:
        return not_built("ppo")
    if config.ppo.reward_source == "reward_model" and not is_ref(reward_model):
        return not_built("ppo", "reward_source=reward_model but the reward model was not trained")
    step = cached(ppo, config.workspace.root, refresh="ppo" in (forced or set()))
    return step(data["feedback"], data["models"], reward_model if is_ref(reward_model) else None, config.ppo, config.workspace)
