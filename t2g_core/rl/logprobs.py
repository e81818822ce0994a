"""Per-token log-probabilities of given token ids under temperature-scaled logits.

    logprobs_t = log softmax(logits_t / tau)[y_t]
    entropy_t  = - sum_v p_v log p_v,  p = softmax(logits_t / tau)      (of the sampling distribution, for logging)

The same tau used for sampling must be applied whenever old, new and reference log-probs are recomputed (§5 A5);
otherwise the first PPO ratio is not 1.
"""

from __future__ import annotations

import torch
from torch import Tensor


def token_logprobs(
    logits: Tensor, token_ids: Tensor, temperature: float = 1.0
) -> Tensor:  # (B, T, V), (B, T) -> (B, T)
    """log pi(y_t) for each position; logits are float32-upcast before the softmax."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:  # (B, T, V) -> (B, T)
    """Entropy of the temperature-scaled next-token distribution at each position (no gradient: a statistic)."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:  # (B, L) -> (B, L)
    """Positions counted over real tokens only (exclusive cumsum), so left padding does not shift them (§5 A2)."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.clamp(min=0)
