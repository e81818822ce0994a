"""Token-level PPO math: pure functions on (B, T) tensors with explicit masks (no models, no I/O)."""

from t2g_core.rl.gae import gae
from t2g_core.rl.kl import per_token_kl
from t2g_core.rl.kl_control import AdaptiveKLController, FixedKLController, make_kl_controller
from t2g_core.rl.logprobs import position_ids_from_mask, token_logprobs
from t2g_core.rl.losses import policy_loss, value_loss
from t2g_core.rl.masks import masked_mean, masked_var, masked_whiten
from t2g_core.rl.rewards import (
    REWARD_MODES,
    RewardMode,
    assemble_rewards,
    last_token_index,
    place_on_last,
    task_rewards,
)

__all__ = [
    "REWARD_MODES",
    "AdaptiveKLController",
    "FixedKLController",
    "RewardMode",
    "assemble_rewards",
    "gae",
    "last_token_index",
    "make_kl_controller",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "per_token_kl",
    "place_on_last",
    "policy_loss",
    "position_ids_from_mask",
    "task_rewards",
    "token_logprobs",
    "value_loss",
]
