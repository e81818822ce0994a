"""The experience the update trains on, steps 4 (KL), 5 (GAE) and 6 (whiten) of a PPO step.

The rollout policy's log-probs, the reference's (the base with the LoRA adapter disabled) and the critic's values
come from no-grad passes in micro-batches; the per-token KL and the reward r_t = m_t (s_t - beta KL_t) + terminal
(:func:`t2g_core.rl.assemble_rewards`) feed the configured advantage estimator (GAE by default), whose advantages
are whitened over the valid tokens of the *global* batch (summed over processes).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from t2g_core.config.ppo import CRITIC_FREE, PPOConfig
from t2g_core.ppo.distributed import all_reduce_sum, to_device
from t2g_core.ppo.models import forward_in_micro_batches
from t2g_core.ppo.rollout import Rollout
from t2g_core.rl import estimate_advantages, masked_whiten


@dataclass
class Experience:
    """What the PPO update trains on, each (B_local, T) on the CPU."""

    old_logprobs: Tensor
    values: Tensor
    advantages: Tensor
    returns: Tensor


def uses_critic(cfg: PPOConfig) -> bool:
    """Whether the advantage estimator needs a critic (critic-free estimators, rloo and grpo, train none)."""
    return cfg.advantage not in CRITIC_FREE


@torch.no_grad()
def old_ref_values(model, ro: Rollout, cfg: PPOConfig, device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Old log-probs, reference log-probs, values (0 without a critic) and the sampling entropy, all (B, T) on the
    CPU, ``cfg.micro_batch_size`` rows per forward."""
    args = (*to_device(device, ro.query_ids, ro.query_mask, ro.response_ids, ro.response_mask), cfg.sampling)
    size = cfg.micro_batch_size
    old_logprobs, values, entropy = forward_in_micro_batches(
        model, *args, micro_batch_size=size, with_values=uses_critic(cfg), with_entropy=True
    )
    ref_logprobs, _ = forward_in_micro_batches(model, *args, micro_batch_size=size, reference=True)
    m = ro.response_mask.float()
    values = torch.zeros_like(m) if values is None else values.float().cpu()
    return old_logprobs.cpu() * m, ref_logprobs.cpu() * m, values * m, entropy.cpu() * m


def advantages_and_returns(
    rewards: Tensor, values: Tensor, mask: Tensor, task: Tensor, group: Tensor | None, cfg: PPOConfig
) -> tuple[Tensor, Tensor]:
    """The configured estimator's advantages, whitened over the global batch, and the critic's returns."""
    advantages, returns = estimate_advantages(
        cfg.advantage, rewards, values, mask, task=task, group=group, gamma=cfg.gamma, lam=cfg.lam
    )
    return masked_whiten(advantages, mask, reduce=all_reduce_sum), returns
