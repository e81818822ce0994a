"""The experience the update trains on, steps 4 (KL), 5 (GAE) and 6 (whiten) of a PPO step.

The rollout policy's log-probs, the reference's and the critic's values come from no-grad passes in micro-batches
(the entropy read off the old-log-prob pass's logits), or from the update's first forward when that is the only one
(:func:`reuses_first_forward`). The rewards (:func:`t2g_core.rl.assemble_rewards`) feed the configured advantage
estimator (:mod:`t2g_core.rl.advantages`), whose advantages are whitened over the valid tokens of the *global* batch.
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


@dataclass
class FirstForward:
    """The first minibatch's training forward, run before the experience: local ``rows`` (in the minibatch's order)
    and their log-probs, values (None without a critic) and entropy, (len(rows), T) on the CPU, with gradients."""

    rows: list[int]
    logprobs: Tensor
    values: Tensor | None
    entropy: Tensor


def uses_critic(cfg: PPOConfig) -> bool:
    """Whether the advantage estimator needs a critic (critic-free estimators, rloo and grpo, train none)."""
    return cfg.advantage_estimator not in CRITIC_FREE


def reuses_first_forward(cfg: PPOConfig) -> bool:
    """One epoch of one minibatch in one chunk: the update's only forward sees the rollout policy (and critic), so
    it stands in for the no-grad old-log-prob and value pass (dropout is off and both apply the temperature)."""
    return cfg.ppo_epochs == 1 and cfg.minibatches == 1 and cfg.grad_accum == 1


@torch.no_grad()
def old_ref_values(
    model, ro: Rollout, cfg: PPOConfig, device, first: FirstForward | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Old log-probs, reference log-probs, values (0 without a critic) and the sampling entropy, all (B, T) on the
    CPU, in micro-batches; with ``first`` only the reference pass runs (the rest are ``first``'s)."""
    args = (*to_device(device, ro.query_ids, ro.query_mask, ro.response_ids, ro.response_mask), cfg.sampling)
    size = cfg.micro_batch_size
    if first is None:
        old_logprobs, values, entropy = forward_in_micro_batches(
            model, *args, micro_batch_size=size, with_values=uses_critic(cfg), with_entropy=True
        )
    else:
        old_logprobs, values, entropy = _in_batch_order(ro, first)
    ref_logprobs, _ = forward_in_micro_batches(model, *args, micro_batch_size=size, reference=True)
    m = ro.response_mask.float()
    values = torch.zeros_like(m) if values is None else values.float().cpu()
    return old_logprobs.cpu() * m, ref_logprobs.cpu() * m, values * m, entropy.cpu() * m


def _in_batch_order(ro: Rollout, first: FirstForward) -> tuple[Tensor, Tensor | None, Tensor]:
    """``first``'s outputs, detached, at their rows of the local batch (B, T)."""
    idx, shape = torch.tensor(first.rows, dtype=torch.long), ro.response_ids.shape
    parts = (first.logprobs, first.values, first.entropy)
    return tuple(None if t is None else torch.zeros(shape, dtype=t.dtype).index_put_((idx,), t.detach()) for t in parts)


def advantages_and_returns(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    task: Tensor,
    terminal: Tensor,
    group: Tensor | None,
    cfg: PPOConfig,
    own: Tensor | None = None,
) -> tuple[Tensor, Tensor]:  # (B, T) x4, (B,), (B,), (B, T) -> (B, T) x2
    """The configured estimator's advantages, whitened over the global batch, and the critic's returns; ``own``: a
    term of each token's own advantage that no other token and no return sees (top-k self-distillation)."""
    advantages, returns = estimate_advantages(
        cfg.advantage_estimator,
        rewards,
        values,
        mask,
        task=task,
        terminal=terminal,
        group=group,
        gamma=cfg.gamma,
        lam=cfg.lam,
        grpo_std_floor=cfg.grpo_std_floor,
    )
    if own is not None:
        advantages = advantages + own * mask.to(advantages.dtype)
    return masked_whiten(advantages, mask, reduce=all_reduce_sum), returns
