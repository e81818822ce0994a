"""Span-reward PPO trainer (rollout -> score -> place span rewards -> KL -> GAE -> whiten -> update)."""

from t2g_core.ppo.scoring import CriticSource, RewardSource
from t2g_core.ppo.trainer import PPOResult, PPOTrainer, train

__all__ = ["CriticSource", "PPOResult", "PPOTrainer", "RewardSource", "train"]
