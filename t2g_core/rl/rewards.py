"""Task rewards placed on policy tokens, and the per-token reward PPO optimises.

Span labels (ARCHITECTURE §4):  delta_t = +1 on a token overlapping a good span, -1 on a poor span, 0 elsewhere.
Three placements of the same task signal, chosen by ``PPOConfig.reward_mode`` (one small function each):

    span    s_t = c * delta_t                                (Text2Grad)
    scalar  s_t = [t = last] * c * sum_u delta_u            (classic RLHF: one score on the last real token / EOS)
    dense   s_t = m_t * c * sum_u delta_u / T_valid          (the paper's ablation: the sequence label on every token)

The scalar and dense totals equal the span total, so only the placement differs (demo_task_findings "fair scalar").
The reward PPO sees is

    r_t = m_t (s_t - beta * KL_t) + [t = last] * terminal_t

where ``terminal`` carries an optional hybrid scalar, the parse-failure fallback and the missing-EOS penalty.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

RewardMode = Literal["span", "scalar", "dense"]


def last_token_index(mask: Tensor) -> Tensor:  # (B, T) -> (B,)
    """Index of the last true position per row (the EOS, or the last token of a truncated response); 0 if none."""
    m = mask.long()
    idx = torch.arange(m.shape[1], device=m.device).expand_as(m)
    return (idx * m).amax(dim=1)


def place_on_last(scores: Tensor, mask: Tensor) -> Tensor:  # (B,), (B, T) -> (B, T)
    """A (B, T) tensor with ``scores`` on each row's last valid token (never on the first PAD, trl#3750)."""
    out = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
    has_token = mask.any(dim=1)
    out[torch.arange(mask.shape[0]), last_token_index(mask)] = scores * has_token.to(scores.dtype)
    return out


def span_rewards(labels: Tensor, mask: Tensor, coef: float) -> Tensor:  # (B, T) -> (B, T)
    return coef * labels * mask.to(labels.dtype)


def scalar_rewards(labels: Tensor, mask: Tensor, coef: float) -> Tensor:
    total = (labels * mask.to(labels.dtype)).sum(dim=1)
    return place_on_last(coef * total, mask)


def dense_rewards(labels: Tensor, mask: Tensor, coef: float) -> Tensor:
    m = mask.to(labels.dtype)
    total = (labels * m).sum(dim=1, keepdim=True)
    return coef * total / m.sum(dim=1, keepdim=True).clamp(min=1) * m


REWARD_MODES: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "span": span_rewards,
    "scalar": scalar_rewards,
    "dense": dense_rewards,
}


def task_rewards(mode: RewardMode, labels: Tensor, mask: Tensor, coef: float) -> Tensor:  # (B, T)
    """Place the span labels ``labels`` (B, T) with the chosen mode."""
    try:
        fn = REWARD_MODES[mode]
    except KeyError:
        raise ValueError(f"unknown reward_mode {mode!r}; expected one of {', '.join(REWARD_MODES)}") from None
    return fn(labels, mask, coef)


def assemble_rewards(
    task: Tensor, kl: Tensor, mask: Tensor, beta: float, terminal: Tensor | None = None
) -> Tensor:  # (B, T), (B, T), (B, T), (B,) -> (B, T)
    """r_t = m_t (s_t - beta KL_t) + [t = last] terminal."""
    rewards = (task - beta * kl) * mask.to(task.dtype)
    if terminal is not None:
        rewards = rewards + place_on_last(terminal.to(rewards.dtype), mask)
    return rewards
