"""PPO losses (Schulman et al. 2017), token-level, aggregated as a token mean.

    ratio_t  = exp(logprobs_t - old_logprobs_t)
    L_pi     = sum_t m_t max(-A_t ratio_t, -A_t clip(ratio_t, 1-eps, 1+eps)) / N
    V_clip_t = old_values_t + clip(values_t - old_values_t, -eps_v, eps_v)
    L_V      = 0.5 sum_t m_t max((values_t - R_t)^2, (V_clip_t - R_t)^2) / N

N defaults to the number of valid tokens; pass ``normalizer`` = the token count of the whole (global) minibatch
when the minibatch is split over gradient-accumulation chunks or processes, so that the summed gradients equal
those of one token-mean over the minibatch. ``approx_kl`` estimates KL(old || new) from the old samples with k3:
mean((ratio - 1) - log ratio).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _aggregate(x: Tensor, mask: Tensor, normalizer: float | Tensor | None) -> Tensor:
    m = mask.to(x.dtype)
    n = m.sum().clamp(min=1) if normalizer is None else normalizer
    return (x * m).sum() / n


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cliprange: float,
    normalizer: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:  # (B, T) x4
    """Clipped surrogate loss and detached stats sums: clipfrac, approx_kl, ratio (means over ``normalizer``)."""
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    loss = _aggregate(torch.maximum(unclipped, clipped), mask, normalizer)
    with torch.no_grad():
        stats = {
            "clipfrac": _aggregate((clipped > unclipped).to(ratio.dtype), mask, normalizer),
            "approx_kl": _aggregate(torch.expm1(log_ratio) - log_ratio, mask, normalizer),
            "ratio": _aggregate(ratio, mask, normalizer),
        }
    return loss, stats


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    cliprange_value: float,
    normalizer: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:  # (B, T) x4
    """Clipped value loss (max of unclipped and clipped squared error) and its clip fraction."""
    clipped_values = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    err = (values - returns) ** 2
    err_clipped = (clipped_values - returns) ** 2
    loss = 0.5 * _aggregate(torch.maximum(err, err_clipped), mask, normalizer)
    with torch.no_grad():
        stats = {"vf_clipfrac": _aggregate((err_clipped > err).to(values.dtype), mask, normalizer)}
    return loss, stats
