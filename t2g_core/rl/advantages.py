"""Advantage estimators (``PPOConfig.advantage_estimator``): how per-token rewards become per-token credit.

The equations of each estimator (gae, span_local, span_bootstrap, rloo, grpo) and of the terminal component Z they
share: docs/ppo.md, "The estimators' equations"; why they are built so: "Credit assignment" there. Returns (value
targets) are A + V for gae and A - Z + V for the span estimators (x only); the critic-free ones return zeros (there is
no critic to train). Advantages and returns are 0 at masked positions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from t2g_core.rl.gae import gae
from t2g_core.rl.rewards import last_token_index, place_on_last

AdvantageKind = Literal["gae", "span_local", "span_bootstrap", "rloo", "grpo"]


def segment_starts(task: Tensor, mask: Tensor) -> Tensor:  # (B, T), (B, T) -> (B, T) bool
    """True on the first valid token after each run of equal non-zero ``task`` values (a judged span, an anchored
    omission): the token that shows the run is over, read from s_{t-1} and s_t (masked positions skipped)."""
    m = mask.bool()
    starts = torch.zeros_like(m)
    prev = torch.zeros_like(task[:, 0])
    for t in range(task.shape[1]):
        starts[:, t] = m[:, t] & (prev != 0) & (task[:, t] != prev)
        prev = torch.where(m[:, t], task[:, t], prev)
    return starts


@torch.no_grad()
def segment_gae(
    rewards: Tensor, values: Tensor, mask: Tensor, starts: Tensor, gamma: float, lam: float, bootstrap: bool
) -> tuple[Tensor, Tensor]:  # (B, T) x4 -> (B, T) x2
    """Credit inside segments: each token's trace runs up to and including the next segment start H(t) (``starts``).
    ``bootstrap``: GAE, the start contributing its TD error; otherwise the discounted sum of r_t .. r_H minus V_t
    (no lambda: inside a horizon a value would belong to another). Masked positions are skipped as in
    :func:`t2g_core.rl.gae.gae` (with no starts, bootstrap *is* gae)."""
    m = mask.to(values.dtype)
    first = starts.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    carry = torch.zeros_like(values[:, 0])  # what position t + 1 passes back to t
    advantages = torch.zeros_like(values)
    returns = torch.zeros_like(values)
    for t in reversed(range(rewards.shape[1])):
        if bootstrap:
            own = rewards[:, t] + gamma * next_value - values[:, t]  # the TD error
            adv_t = own + gamma * lam * carry
            ret_t = adv_t + values[:, t]
        else:
            own = rewards[:, t]
            ret_t = own + gamma * carry  # the return up to H(t)
            adv_t = ret_t - values[:, t]
        passed = first[:, t] * own + (1 - first[:, t]) * (adv_t if bootstrap else ret_t)  # a start passes back its own
        next_value = m[:, t] * values[:, t] + (1 - m[:, t]) * next_value
        carry = m[:, t] * passed + (1 - m[:, t]) * carry
        advantages[:, t], returns[:, t] = adv_t, ret_t
    return advantages * m, returns * m


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
    rewards: Tensor, mask: Tensor, group: Tensor, gamma: float, std_floor: float | None = None
) -> Tensor:  # (B, T), (B,) -> (B, T)
    """Reward-to-go minus the group mean per position, divided by nothing (``std_floor`` None) or by the group's
    standard deviation at that position, floored at ``std_floor``."""
    group = _check_groups(group)
    to_go = reward_to_go(rewards, mask, gamma)
    sums, counts = _group_stats(to_go, group)
    centred = to_go - sums / counts[:, None]
    if std_floor is None:
        return centred * mask.to(to_go.dtype)
    sq_sums, _ = _group_stats(centred**2, group)
    std = torch.sqrt(sq_sums / (counts - 1)[:, None])  # unbiased, as torch.std, per position
    return centred / std.clamp(min=std_floor) * mask.to(to_go.dtype)


@torch.no_grad()
def terminal_advantages(
    terminal: Tensor, mask: Tensor, group: Tensor | None, gamma: float
) -> Tensor:  # (B,), (B, T), (B,) -> (B, T)
    """Z_{i,t} = gamma^(last_i - t) z_i - the mean z of the other samples of i's prompt (group_size >= 2) or, with one
    sample per prompt, of the batch; 0 when there is no other sample, and at masked positions."""
    z = terminal.to(torch.float64)
    single = group is None or bool((_group_stats(torch.ones(len(group), dtype=torch.float64), group)[1] < 2).any())
    pool = torch.zeros(len(z), dtype=torch.long) if single else group
    sums, counts = _group_stats(z, pool)
    baseline = torch.where(counts > 1, (sums - z) / (counts - 1).clamp(min=1), torch.zeros_like(z))
    steps_left = (last_token_index(mask)[:, None] - torch.arange(mask.shape[1])[None, :]).clamp(min=0)
    discount = torch.tensor(gamma, dtype=torch.float64) ** steps_left
    out = (discount * z[:, None] - baseline[:, None]) * mask.to(torch.float64)
    return out.to(terminal.dtype)


def _gae(rewards, values, mask, *, task, terminal, group, gamma, lam, **_):
    return gae(rewards, values, mask, gamma, lam)


def _span(bootstrap: bool):
    def estimate(rewards, values, mask, *, task, terminal, group, gamma, lam, **_):
        per_token = rewards if terminal is None else rewards - place_on_last(terminal.to(rewards.dtype), mask)
        advantages, returns = segment_gae(per_token, values, mask, segment_starts(task, mask), gamma, lam, bootstrap)
        if terminal is not None:
            advantages = advantages + terminal_advantages(terminal, mask, group, gamma).to(advantages.dtype)
        return advantages, returns

    return estimate


def _rloo(rewards, values, mask, *, task, terminal, group, gamma, lam, **_):
    return rloo_advantages(rewards, mask, group, gamma), torch.zeros_like(rewards)


def _grpo(rewards, values, mask, *, task, terminal, group, gamma, lam, grpo_std_floor):
    return grpo_advantages(rewards, mask, group, gamma, grpo_std_floor), torch.zeros_like(rewards)


ESTIMATORS: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {
    "gae": _gae,
    "span_local": _span(bootstrap=False),
    "span_bootstrap": _span(bootstrap=True),
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
    terminal: Tensor | None,
    group: Tensor | None,
    gamma: float,
    lam: float,
    grpo_std_floor: float | None = None,
) -> tuple[Tensor, Tensor]:  # (B, T) ... -> advantages (B, T), returns (B, T)
    """(advantages, returns) of the chosen estimator. ``rewards`` = r (terminal included), ``task`` = the placed task
    signal s (segment ends), ``terminal`` = z (B,), the part of r on each last token that is the sequence's (None:
    none), ``group`` = the prompt index of each sample (group baselines, the terminal's baseline pool)."""
    try:
        fn = ESTIMATORS[kind]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {kind!r}; expected one of {', '.join(ESTIMATORS)}") from None
    given = {"task": task, "terminal": terminal, "group": group, "gamma": gamma, "lam": lam}
    return fn(rewards, values, mask, **given, grpo_std_floor=grpo_std_floor)
