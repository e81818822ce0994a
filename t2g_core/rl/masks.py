"""Masked statistics over valid tokens, optionally reduced across processes.

    mean(x; m)  = sum_t m_t x_t / sum_t m_t
    var(x; m)   = sum_t m_t (x_t - mean)^2 / (sum_t m_t - 1)      (unbiased, as in TRL / lm-human-preferences)
    whiten(x)   = (x - mean) / sqrt(var + eps)   [+ mean when shift_mean=False]
    EV(V; R)    = 1 - var(R - V) / var(R)                          (explained variance of the critic; 1 = perfect)

``reduce`` (optional) all-reduces a tensor of sums in place (e.g. ``torch.distributed.all_reduce``), so that
every process whitens with the statistics of the *global* batch (checklist §5 D17).
Masks are bool or {0, 1}; True = a real response token.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Reduce = Callable[[Tensor], None] | None


def _sums(x: Tensor, mask: Tensor, reduce: Reduce) -> Tensor:
    m = mask.to(x.dtype)
    sums = torch.stack([(x * m).sum(), m.sum()]).to(torch.float64)
    if reduce is not None:
        reduce(sums)
    return sums


def masked_mean(x: Tensor, mask: Tensor, reduce: Reduce = None) -> Tensor:  # (B, T), (B, T) -> ()
    """Mean of ``x`` over positions where ``mask`` is true."""
    total, count = _sums(x, mask, reduce)
    if count == 0:
        raise ValueError("masked_mean: the mask selects no element")
    return (total / count).to(x.dtype)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True, reduce: Reduce = None) -> Tensor:  # -> ()
    """Variance of ``x`` over masked positions (Bessel-corrected when ``unbiased``)."""
    mean = masked_mean(x, mask, reduce)
    sq, count = _sums((x - mean) ** 2, mask, reduce)
    if unbiased:
        if count < 2:
            raise ValueError("masked_var: fewer than 2 valid elements for an unbiased variance")
        return (sq / (count - 1)).to(x.dtype)
    return (sq / count).to(x.dtype)


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8, reduce: Reduce = None) -> Tensor:
    """Whiten ``x`` over valid tokens; masked positions come back as 0. ``shift_mean=False`` keeps the original mean
    (use it for *rewards*: shifting dense rewards flips their sign, §5 B11)."""
    mean = masked_mean(x, mask, reduce)
    var = masked_var(x, mask, reduce=reduce)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask.to(x.dtype)


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor, reduce: Reduce = None) -> float:  # (B, T) x3
    """1 - var(R - V) / var(R) over valid tokens (nan when the returns do not vary)."""
    var_r = float(masked_var(returns, mask, unbiased=False, reduce=reduce))
    var_err = float(masked_var(returns - values, mask, unbiased=False, reduce=reduce))
    return 1.0 - var_err / var_r if var_r > 0 else float("nan")
