"""Token-level PPO math: pure functions on (B, T) tensors with explicit masks (no models, no I/O)."""

from t2g_core.rl.advantages import (
    estimate_advantages,
    grpo_advantages,
    reward_to_go,
    rloo_advantages,
    segment_gae,
    segment_starts,
    terminal_advantages,
)
from t2g_core.rl.gae import gae
from t2g_core.rl.kl import per_token_kl
from t2g_core.rl.kl_control import AdaptiveKLController, FixedKLController, make_kl_controller
from t2g_core.rl.logprobs import position_ids_from_mask, token_entropy, token_logprobs
from t2g_core.rl.losses import policy_loss, value_loss
from t2g_core.rl.masks import explained_variance, masked_mean, masked_var, masked_whiten
from t2g_core.rl.rewards import assemble_rewards, omission_labels, task_rewards, unit_label_sums

__all__ = [
    "AdaptiveKLController",
    "FixedKLController",
    "assemble_rewards",
    "estimate_advantages",
    "explained_variance",
    "gae",
    "grpo_advantages",
    "make_kl_controller",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "per_token_kl",
    "omission_labels",
    "policy_loss",
    "position_ids_from_mask",
    "reward_to_go",
    "rloo_advantages",
    "segment_gae",
    "segment_starts",
    "task_rewards",
    "terminal_advantages",
    "token_entropy",
    "unit_label_sums",
    "token_logprobs",
    "value_loss",
]
