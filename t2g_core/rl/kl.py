"""Per-token KL estimators between the policy and the reference, on the sampled tokens.

    k1_t = log pi(y_t) - log pi_ref(y_t)                       (unbiased, can be negative per token)
    k3_t = (r - 1) - log r,  r = pi_ref(y_t) / pi(y_t)          (unbiased, >= 0, lower variance; Schulman 2020)

Both are zero outside the response mask.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

KLEstimator = Literal["k1", "k3"]


def per_token_kl(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, estimator: KLEstimator = "k1") -> Tensor:
    """KL_t per response token (B, T); 0 where ``mask`` is false."""
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        kl = log_ratio
    elif estimator == "k3":
        kl = torch.expm1(-log_ratio) + log_ratio  # (r - 1) - log r with log r = -log_ratio
    else:
        raise ValueError(f"unknown KL estimator {estimator!r}; expected 'k1' or 'k3'")
    return kl * mask.to(kl.dtype)
