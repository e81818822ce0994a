"""Generalized advantage estimation over response tokens (Schulman et al. 2016).

    dV_t = r_t + gamma * V_{t+1} - V_t
    A_t  = dV_t + gamma * lam * A_{t+1}
    R_t  = A_t + V_t                          (returns, computed before any advantage whitening)

V after the last valid token is 0 (bootstrap 0 after EOS). Masked positions *inside* a sequence are skipped: the
next value and the running advantage are carried across them unchanged (as verl does), so a token whose mask is
false neither receives nor passes on credit. Advantages and returns are 0 at masked positions.
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.no_grad()
def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:  # (B, T) x3
    """Return (advantages, returns), both (B, T), zero where ``mask`` is false."""
    m = mask.to(values.dtype)
    T = rewards.shape[1]
    next_value = torch.zeros_like(values[:, 0])
    last_adv = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * last_adv
        next_value = m[:, t] * values[:, t] + (1 - m[:, t]) * next_value
        last_adv = m[:, t] * adv_t + (1 - m[:, t]) * last_adv
        advantages[:, t] = adv_t
    advantages = advantages * m
    returns = (advantages + values) * m
    return advantages, returns
