"""Task rewards placed on policy tokens, and the per-token reward PPO optimises.

``reward_mode`` places the task signal d_t = delta_t + o_t (span labels plus omission labels; one small function
each, the table: docs/ppo.md, "Reward modes"). PPO sees r_t = m_t (s_t - beta * KL_t) + [t = last] * terminal_t,
``terminal`` carrying the hybrid scalar (span and dense only), a critic's verdict (its labels then scaled to unit sums,
:func:`unit_label_sums`), the parse-failure fallback, the missing-EOS penalty and the degenerate reward (docs/ppo.md,
"A critic's verdict").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

RewardMode = Literal["span", "scalar", "uniform", "dense"]
OmissionPlacement = Literal["anchor", "end"]


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


def omission_labels(
    missing: Tensor, mask: Tensor, penalty: float, placement: OmissionPlacement
) -> Tensor:  # (B, T) counts, (B, T) -> (B, T)
    """o_t: ``-penalty`` per missing item, at its anchor token (``missing[b, t]`` items belong at t) or at the end;
    anchors on padding move to the last valid token, so no omission is lost."""
    m = mask.to(missing.dtype)
    if placement == "end":
        return place_on_last(-penalty * missing.sum(dim=1), mask)
    if placement != "anchor":
        raise ValueError(f"unknown omission placement {placement!r}; expected 'anchor' or 'end'")
    stray = (missing * (1 - m)).sum(dim=1)  # anchored on padding: belongs at the end of the response
    return -penalty * (missing * m + place_on_last(stray, mask))


def unit_label_sums(labels: Tensor, mask: Tensor) -> Tensor:  # (B, T) -> (B, T)
    """Labels scaled per row so the positive ones sum to +1 and the negative ones to -1 (rows without either keep 0)."""
    m = mask.to(labels.dtype)
    pos, neg = (labels.clamp(min=0) * m), (labels.clamp(max=0) * m)
    pos_sum, neg_sum = pos.sum(dim=1, keepdim=True), -neg.sum(dim=1, keepdim=True)
    one = torch.ones_like(pos_sum)
    return pos / pos_sum.where(pos_sum > 0, one) + neg / neg_sum.where(neg_sum > 0, one)


def span_rewards(labels: Tensor, mask: Tensor, coef: float) -> Tensor:  # (B, T) -> (B, T)
    return coef * labels * mask.to(labels.dtype)


def scalar_rewards(labels: Tensor, mask: Tensor, coef: float) -> Tensor:
    total = (labels * mask.to(labels.dtype)).sum(dim=1)
    return place_on_last(coef * total, mask)


def uniform_rewards(labels: Tensor, mask: Tensor, coef: float) -> Tensor:
    m = mask.to(labels.dtype)
    total = (labels * m).sum(dim=1, keepdim=True)
    return coef * total / m.sum(dim=1, keepdim=True).clamp(min=1) * m


REWARD_MODES: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "span": span_rewards,
    "dense": span_rewards,  # same placement as span; the labels are word-level (ppo.scoring)
    "scalar": scalar_rewards,
    "uniform": uniform_rewards,
}


def task_rewards(mode: RewardMode, labels: Tensor, mask: Tensor, coef: float) -> Tensor:  # (B, T)
    """Place the task signal ``labels`` (B, T) (token labels plus omission labels) with the chosen mode."""
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
