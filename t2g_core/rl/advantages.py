"""Advantage estimators (``PPOConfig.advantage``): how per-token rewards become per-token credit.

With r the per-token rewards (task signal, KL and terminal already in), V the critic's values, m the response mask,
s the placed task signal (span labels before KL) and e a *segment end* (the last token of a run of equal non-zero
s, i.e. of a judged span or an anchored omission):

    gae             A = GAE(r, V; gamma, lam)                                         (Schulman et al. 2016)
    span_local      GAE inside segments, each span its own episode: at a segment end e
                        A_e = r_e - V_e           (neither V_{e+1} nor A_{e+1} crosses back)
                    so a later span's reward never reaches an earlier token. What follows a span is worth nothing
                    to it: with omissions placed at the end, stopping early costs the stopping token nothing.
    span_bootstrap  GAE with lambda_t = 0 at segment ends (a variable-lambda return, Sutton & Barto 12.8):
                        A_e = r_e + gamma V_{e+1} - V_e
                    credit beyond a span is the critic's *expectation* V_{e+1}, not the sampled later rewards, so
                    the later spans' noise is gone but the value of going on is kept (stopping early forfeits
                    V_{e+1}: the omission signal survives). Needs a competent critic (critic warm-up).
    rloo            A_{i,t} = G_{i,t} - mean_{j in group(i), j != i} G_{j,t}                        (critic-free)
    grpo            A_{i,t} = (G_{i,t} - mean_{j in group(i)} G_{j,t}) / (std_{j in group(i)} G_{j,0} + eps)

with G_{i,t} = sum_{u >= t} gamma^(u-t) r_{i,u} the reward-to-go of sample i (0 past its end) and a group = the k
samples of one prompt. The group baseline is aligned by token position: it depends only on the *other* samples, so
it is a valid (unbiased) baseline for every token of sample i (rloo; grpo includes i itself, as GRPO does), and the
span rewards stay per token in G. Returns (value targets) are A + V for the critic-based estimators; the critic-free
ones return zeros (there is no critic to train). Advantages and returns are 0 at masked positions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from t2g_core.rl.gae import gae

AdvantageKind = Literal["gae", "span_local", "span_bootstrap", "rloo", "grpo"]


def span_ends(task: Tensor, mask: Tensor) -> Tensor:  # (B, T), (B, T) -> (B, T) bool
    """True on the last token of each run of equal non-zero ``task`` values (a span, an anchored omission)."""
    m = mask.bool()
    labelled = (task != 0) & m
    nxt = torch.cat([task[:, 1:], torch.zeros_like(task[:, :1])], dim=1)
    nxt_valid = torch.cat([m[:, 1:], torch.zeros_like(m[:, :1])], dim=1)
    return labelled & (~nxt_valid | (nxt != task))


@torch.no_grad()
def segment_gae(
    rewards: Tensor, values: Tensor, mask: Tensor, ends: Tensor, gamma: float, lam: float, bootstrap: bool
) -> tuple[Tensor, Tensor]:  # (B, T) x4 -> (B, T) x2
    """GAE whose recursion is cut after each segment end (``ends``); ``bootstrap`` keeps V_{e+1} in the end's TD error.

    Masked positions inside a sequence are skipped as in :func:`t2g_core.rl.gae.gae` (with no ends it *is* gae).
    """
    m = mask.to(values.dtype)
    cut = ends.to(values.dtype)
    keep_value = torch.ones_like(cut) if bootstrap else 1 - cut
    next_value = torch.zeros_like(values[:, 0])
    last_adv = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * keep_value[:, t] * next_value - values[:, t]
        adv_t = delta + gamma * lam * (1 - cut[:, t]) * last_adv
        next_value = m[:, t] * values[:, t] + (1 - m[:, t]) * next_value
        last_adv = m[:, t] * adv_t + (1 - m[:, t]) * last_adv
        advantages[:, t] = adv_t
    advantages = advantages * m
    return advantages, (advantages + values) * m


def reward_to_go(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:  # (B, T) -> (B, T)
    """G_t = sum_{u >= t} gamma^(u-t) r_u over valid tokens (GAE with V = 0 and lambda = 1)."""
    return gae(rewards, torch.zeros_like(rewards), mask, gamma, 1.0)[0]


def _group_stats(x: Tensor, group: Tensor) -> tuple[Tensor, Tensor]:  # (B, ...), (B,) -> per-row group sum, size
    n_groups = int(group.max()) + 1
    sums = torch.zeros((n_groups, *x.shape[1:]), dtype=x.dtype).index_add_(0, group, x)
    counts = torch.bincount(group, minlength=n_groups).to(x.dtype)
    return sums[group], counts[group]


def _check_groups(group: Tensor | None) -> Tensor:
    if group is None:
        raise ValueError("group baselines need the group (prompt) of every sample")
    _, counts = _group_stats(torch.ones(len(group), dtype=torch.float64), group)
    if bool((counts < 2).any()):
        raise ValueError("group baselines need at least 2 samples per prompt (ppo.group_size >= 2)")
    return group


@torch.no_grad()
def rloo_advantages(rewards: Tensor, mask: Tensor, group: Tensor, gamma: float) -> Tensor:  # (B, T), (B,) -> (B, T)
    """Reward-to-go minus the leave-one-out mean reward-to-go of the other samples of the same prompt, per position."""
    group = _check_groups(group)
    to_go = reward_to_go(rewards, mask, gamma)
    sums, counts = _group_stats(to_go, group)
    baseline = (sums - to_go) / (counts - 1)[:, None]
    return (to_go - baseline) * mask.to(to_go.dtype)


@torch.no_grad()
def grpo_advantages(
    rewards: Tensor, mask: Tensor, group: Tensor, gamma: float, eps: float = 1e-6
) -> Tensor:  # (B, T), (B,) -> (B, T)
    """Reward-to-go minus the group mean per position, over the group's standard deviation of total returns."""
    group = _check_groups(group)
    to_go = reward_to_go(rewards, mask, gamma)
    sums, counts = _group_stats(to_go, group)
    totals = to_go[:, 0]
    tot_sums, _ = _group_stats(totals, group)
    sq_sums, _ = _group_stats((totals - tot_sums / counts) ** 2, group)
    std = torch.sqrt(sq_sums / (counts - 1))  # unbiased, as torch.std
    return (to_go - sums / counts[:, None]) / (std + eps)[:, None] * mask.to(to_go.dtype)


def _gae(rewards, values, mask, task, group, gamma, lam):
    return gae(rewards, values, mask, gamma, lam)


def _span_local(rewards, values, mask, task, group, gamma, lam):
    return segment_gae(rewards, values, mask, span_ends(task, mask), gamma, lam, bootstrap=False)


def _span_bootstrap(rewards, values, mask, task, group, gamma, lam):
    return segment_gae(rewards, values, mask, span_ends(task, mask), gamma, lam, bootstrap=True)


def _rloo(rewards, values, mask, task, group, gamma, lam):
    return rloo_advantages(rewards, mask, group, gamma), torch.zeros_like(rewards)


def _grpo(rewards, values, mask, task, group, gamma, lam):
    return grpo_advantages(rewards, mask, group, gamma), torch.zeros_like(rewards)


ESTIMATORS: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {
    "gae": _gae,
    "span_local": _span_local,
    "span_bootstrap": _span_bootstrap,
    "rloo": _rloo,
    "grpo": _grpo,
}


def estimate_advantages(
    kind: AdvantageKind,
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    *,
    task: Tensor,
    group: Tensor | None,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:  # (B, T) ... -> advantages (B, T), returns (B, T)
    """(advantages, returns) of the chosen estimator; ``task`` = the placed task signal s (segment ends),
    ``group`` = the prompt index of each sample (group baselines)."""
    try:
        fn = ESTIMATORS[kind]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {kind!r}; expected one of {', '.join(ESTIMATORS)}") from None
    return fn(rewards, values, mask, task, group, gamma, lam)
