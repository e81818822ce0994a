"""Per-token log-probabilities of given token ids under temperature-scaled logits.

    logprobs_t = log softmax(logits_t / tau)[y_t] = logits_t[y_t] / tau - logsumexp_v(logits_t[v] / tau)
    entropy_t  = - sum_v p_v log p_v,  p = softmax(logits_t / tau)      (of the sampling distribution, for logging)

The same tau used for sampling must be applied whenever old, new and reference log-probs are recomputed (§5 A5);
otherwise the first PPO ratio is not 1.

:func:`token_logprobs` is the plain form: a float32 log-softmax over the whole (B, T, V) logits (about 6 GB per pass
at B x T = 8 x 512 and a 128k vocabulary). :func:`selective_logprobs` computes the same numbers from the hidden
states, ``chunk_tokens`` positions at a time: each chunk goes through the LM head, is upcast to float32, and only its
logsumexp and the target logit are kept, so at most (chunk_tokens, V) logits exist at once and the full (B, T, V)
logits are never materialised. Under autograd each chunk is checkpointed (its logits are recomputed in the backward
pass instead of being kept), so training holds one chunk of logits at a time too; a batch that fits in one chunk
keeps its logits for the backward instead (the same peak, no second pass through the head). Gradients flow through
both.
:func:`selective_logprobs_and_entropy` reads the entropy off the same chunk of logits, so logging it costs no second
pass through the (d x V) head.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def token_logprobs(
    logits: Tensor, token_ids: Tensor, temperature: float = 1.0
) -> Tensor:  # (B, T, V), (B, T) -> (B, T)
    """log pi(y_t) for each position; logits are float32-upcast before the softmax."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def _chunk_logprobs(hidden: Tensor, lm_head, ids: Tensor, temperature: float, with_entropy: bool = False):  # (N, d)
    logits = lm_head(hidden).float()  # (N, V), the only vocabulary-sized tensor
    if temperature != 1.0:
        logits = logits.div_(temperature)  # in place: autograd keeps neither the head's output nor the cast's
    lse = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, ids[:, None]).squeeze(-1) - lse
    if not with_entropy:
        return logprobs
    # Last, and saving nothing for the backward: a checkpointed chunk's recomputation stops before it.
    with torch.no_grad():
        entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # -sum p log p, with log p = logits - lse
    return logprobs, entropy


def selective_logprobs(
    hidden: Tensor, lm_head, token_ids: Tensor, temperature: float = 1.0, chunk_tokens: int = 1024
) -> Tensor:  # (B, T, d), (B, T) -> (B, T) float32
    """log pi(y_t) from the hidden states that precede each token, ``chunk_tokens`` positions at a time; ``lm_head``
    maps (N, d) hidden states to (N, V) logits (the model's output layer, or a function around it)."""
    return _selective(hidden, lm_head, token_ids, temperature, chunk_tokens, with_entropy=False)[0]


def selective_logprobs_and_entropy(
    hidden: Tensor, lm_head, token_ids: Tensor, temperature: float = 1.0, chunk_tokens: int = 1024
) -> tuple[Tensor, Tensor]:  # (B, T, d), (B, T) -> (B, T), (B, T) float32
    """:func:`selective_logprobs` and, from the same chunk of logits (no second pass through the head), the entropy
    of each position's sampling distribution (:func:`token_entropy`; no gradient: a statistic)."""
    return _selective(hidden, lm_head, token_ids, temperature, chunk_tokens, with_entropy=True)


def _selective(hidden: Tensor, lm_head, token_ids: Tensor, temperature: float, chunk_tokens: int, with_entropy: bool):
    from torch.utils.checkpoint import checkpoint

    b, t, d = hidden.shape
    flat_h, flat_ids = hidden.reshape(b * t, d), token_ids.reshape(b * t)
    head_params = list(lm_head.parameters()) if isinstance(lm_head, nn.Module) else []
    # One chunk's logits are allowed to exist; with a single chunk, keeping them for the backward holds no more than
    # recomputing them there would, so only several chunks are checkpointed.
    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head_params))
    recompute = grad and b * t > chunk_tokens
    parts = []
    for i in range(0, b * t, chunk_tokens):
        args = (flat_h[i : i + chunk_tokens], lm_head, flat_ids[i : i + chunk_tokens], temperature, with_entropy)
        out = checkpoint(_chunk_logprobs, *args, use_reentrant=False) if recompute else _chunk_logprobs(*args)
        parts.append(out if with_entropy else (out,))
    if not parts:
        empty = hidden.new_zeros((b, t), dtype=torch.float32)
        return (empty, empty) if with_entropy else (empty,)
    return tuple(torch.cat(col).reshape(b, t) for col in zip(*parts, strict=True))


@torch.no_grad()
def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:  # (B, T, V) -> (B, T)
    """Entropy of the temperature-scaled next-token distribution at each position (no gradient: a statistic)."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:  # (B, L) -> (B, L)
    """Positions counted over real tokens only (exclusive cumsum), so left padding does not shift them (§5 A2)."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.clamp(min=0)
