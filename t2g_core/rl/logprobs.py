"""Per-token log-probabilities of given token ids under the sampling distribution: temperature, then top-k, then
top-p, renormalised (the order of transformers' logits warpers, and of vLLM's sampler). The equations, and why the
wanted token always stays in the set (``keep``: a log-prob is never -inf): docs/ppo.md, "Sampling".

:func:`token_logprobs` is the plain form over the whole (B, T, V) logits. :func:`selective_logprobs` computes the
same numbers from the hidden states, ``chunk_tokens`` positions at a time, so at most (chunk_tokens, V) logits exist
at once; under autograd each chunk is checkpointed (recomputed in the backward) unless the batch fits in one chunk.
The set S_t is a selection, not differentiated. :func:`selective_logprobs_and_entropy` reads the entropy off the
same chunk of logits.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from t2g_core.config.sampling import Sampling, as_sampling  # also imported from here, beside the log-probs they shape


@torch.no_grad()
def removed_tokens(scores: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:  # (N, V) -> (N, V) bool
    """True where a token is outside the top-k / top-p set of ``scores`` (logits already divided by the temperature).

    Both cuts are thresholds on the scores: top-k keeps scores >= the k-th largest; top-p then keeps scores >= that
    of the last token whose higher-ranked mass (softmax over the top-k survivors) is < top_p. Only sorted *values*
    are used, never indices, so a recomputation (e.g. under activation checkpointing) selects the same set."""
    n_vocab = scores.shape[-1]
    k = top_k if 0 < top_k < n_vocab else 0
    if not k and top_p >= 1.0:
        return torch.zeros_like(scores, dtype=torch.bool)
    desc = torch.topk(scores, k, dim=-1).values if k else torch.sort(scores, dim=-1, descending=True).values
    threshold = desc[:, -1:]  # (N, 1) the k-th largest score (the smallest one when top_k is off)
    if top_p < 1.0:
        probs = torch.softmax(desc, dim=-1)  # renormalised over the top-k survivors
        above = torch.cumsum(probs, dim=-1)
        above = torch.cat([torch.zeros_like(above[:, :1]), above[:, :-1]], dim=-1)  # mass ranked strictly above
        n_keep = (above < top_p).sum(dim=-1, keepdim=True).clamp(min=1)  # a prefix: `above` never decreases
        threshold = desc.gather(-1, n_keep - 1)
    return scores < threshold


def truncate_(scores: Tensor, sampling: Sampling, keep: Tensor | None = None) -> Tensor:  # (N, V), (N,) -> (N, V)
    """``scores`` (already divided by the temperature) with the tokens outside the sampling set set to -inf, in
    place; ``keep`` (N,) token ids that stay in whatever the cut (the tokens whose log-probs are wanted)."""
    if not sampling.truncates:
        return scores
    removed = removed_tokens(scores.detach(), sampling.top_k, sampling.top_p)
    if keep is not None:
        removed.scatter_(-1, keep[:, None], False)
    return scores.masked_fill_(removed, float("-inf"))


def token_logprobs(
    logits: Tensor, token_ids: Tensor, sampling: Sampling | float = 1.0
) -> Tensor:  # (B, T, V), (B, T) -> (B, T)
    """log pi(y_t) for each position; logits are float32-upcast before the softmax. ``sampling``: a
    :class:`Sampling`, or a bare temperature (whole vocabulary)."""
    sampling = as_sampling(sampling)
    b, t, v = logits.shape
    scores = truncate_((logits.float() / sampling.temperature).reshape(b * t, v), sampling, token_ids.reshape(-1))
    logp = torch.log_softmax(scores, dim=-1).reshape(b, t, v)
    return logp.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def _chunk_logprobs(hidden: Tensor, lm_head, ids: Tensor, sampling: Sampling, with_entropy: bool = False):  # (N, d)
    logits = lm_head(hidden).float()  # (N, V), the only vocabulary-sized tensor
    if sampling.temperature != 1.0:
        logits = logits.div_(sampling.temperature)  # in place: autograd keeps neither the head's output nor the cast's
    logits = truncate_(logits, sampling, keep=ids)
    lse = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, ids[:, None]).squeeze(-1) - lse
    if not with_entropy:
        return logprobs
    # Last, and saving nothing for the backward: a checkpointed chunk's recomputation stops before it.
    with torch.no_grad():
        finite = logits.masked_fill(torch.isinf(logits), 0.0)  # p = 0 outside S_t: 0 * -inf would be NaN
        entropy = lse - (torch.softmax(logits, dim=-1) * finite).sum(-1)  # -sum p log p, log p = logits - lse
    return logprobs, entropy


def selective_logprobs(
    hidden: Tensor, lm_head, token_ids: Tensor, sampling: Sampling | float = 1.0, chunk_tokens: int = 1024
) -> Tensor:  # (B, T, d), (B, T) -> (B, T) float32
    """log pi(y_t) from the hidden states that precede each token, ``chunk_tokens`` positions at a time; ``lm_head``
    maps (N, d) hidden states to (N, V) logits (the model's output layer, or a function around it)."""
    return _selective(hidden, lm_head, token_ids, sampling, chunk_tokens, with_entropy=False)[0]


def selective_logprobs_and_entropy(
    hidden: Tensor, lm_head, token_ids: Tensor, sampling: Sampling | float = 1.0, chunk_tokens: int = 1024
) -> tuple[Tensor, Tensor]:  # (B, T, d), (B, T) -> (B, T), (B, T) float32
    """:func:`selective_logprobs` and, from the same chunk of logits (no second pass through the head), the entropy
    of each position's sampling distribution (:func:`token_entropy`; no gradient: a statistic)."""
    return _selective(hidden, lm_head, token_ids, sampling, chunk_tokens, with_entropy=True)


def _selective(
    hidden: Tensor, lm_head, token_ids: Tensor, sampling: Sampling | float, chunk_tokens: int, with_entropy: bool
):
    from torch.utils.checkpoint import checkpoint

    sampling = as_sampling(sampling)
    b, t, d = hidden.shape
    flat_h, flat_ids = hidden.reshape(b * t, d), token_ids.reshape(b * t)
    head_params = list(lm_head.parameters()) if isinstance(lm_head, nn.Module) else []
    # One chunk's logits are allowed to exist; with a single chunk, keeping them for the backward holds no more than
    # recomputing them there would, so only several chunks are checkpointed.
    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head_params))
    recompute = grad and b * t > chunk_tokens
    parts = []
    for i in range(0, b * t, chunk_tokens):
        args = (flat_h[i : i + chunk_tokens], lm_head, flat_ids[i : i + chunk_tokens], sampling, with_entropy)
        out = checkpoint(_chunk_logprobs, *args, use_reentrant=False) if recompute else _chunk_logprobs(*args)
        parts.append(out if with_entropy else (out,))
    if not parts:
        empty = hidden.new_zeros((b, t), dtype=torch.float32)
        return (empty, empty) if with_entropy else (empty,)
    return tuple(torch.cat(col).reshape(b, t) for col in zip(*parts, strict=True))


@torch.no_grad()
def token_entropy(logits: Tensor, sampling: Sampling | float = 1.0) -> Tensor:  # (B, T, V) -> (B, T)
    """Entropy of the next-token sampling distribution at each position (no gradient: a statistic)."""
    sampling = as_sampling(sampling)
    scores = logits.float() / sampling.temperature
    if not sampling.truncates:
        logp = torch.log_softmax(scores, dim=-1)
        return -(logp.exp() * logp).sum(-1)
    shape = scores.shape
    scores = truncate_(scores.reshape(-1, shape[-1]), sampling)
    logp = torch.log_softmax(scores, dim=-1)
    return -(logp.exp() * logp.masked_fill(scores == float("-inf"), 0.0)).sum(-1).reshape(shape[:-1])


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:  # (B, L) -> (B, L)
    """Positions counted over real tokens only (exclusive cumsum), so left padding does not shift them (§5 A2)."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.clamp(min=0)
