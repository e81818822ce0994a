"""Rollout sampling with a KV cache, left padding and per-sample random streams.

Each sample draws its Gumbel noise from its own generator seeded by (run seed, step, global sample index), so a
sample's tokens do not depend on which process or batch row produced it. It draws from ``ppo.sampling``, the
distribution the trainer's log-probs are computed under. The noise is drawn on the CPU in float64 whatever the device,
so a GPU run samples the same tokens as a CPU run up to logit round-off. This is the ``exact`` generation backend.
"""

from __future__ import annotations

import torch
from torch import Tensor

from t2g_core.rl.logprobs import Sampling, as_sampling, position_ids_from_mask, truncate_


def sample_seed(seed: int, step: int, index: int) -> int:
    """A 63-bit seed for one sample; distinct per (seed, step, global index)."""
    return (seed * 1_000_003 + step) * 1_000_033 + index & 0x7FFF_FFFF_FFFF_FFFF


@torch.no_grad()
def sample_responses(
    model,
    query_ids: Tensor,
    query_mask: Tensor,
    *,
    max_new_tokens: int,
    sampling: Sampling | float,
    eos_token_id: int,
    pad_token_id: int,
    seeds: list[int],
    return_logprobs: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:  # (B, Lq), (B, Lq) -> response ids (B, T), PAD after the first EOS
    """Sample up to ``max_new_tokens`` per row from ``sampling`` (a bare number: a temperature over the whole
    vocabulary); with ``return_logprobs`` also log pi(y_t) under the distribution each token was drawn from (B, T)."""
    sampling = as_sampling(sampling)
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    attn = query_mask.long()
    out = model(input_ids=query_ids, attention_mask=attn, position_ids=position_ids_from_mask(attn), use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1].float()
    next_pos = attn.sum(dim=1, keepdim=True)  # (B, 1) position of the next token
    finished = torch.zeros(query_ids.shape[0], dtype=torch.bool, device=query_ids.device)
    tokens: list[Tensor] = []
    logprobs: list[Tensor] = []
    for _ in range(max_new_tokens):
        uniform = torch.stack([torch.rand(logits.shape[-1], generator=g, dtype=torch.float64) for g in gens])
        gumbel = -torch.log(-torch.log(uniform.clamp(1e-300, 1.0 - 1e-16))).to(logits.device)
        logp = torch.log_softmax(truncate_(logits.double() / sampling.temperature, sampling), -1)  # -inf: cut
        tok = torch.argmax(logp + gumbel, dim=-1)
        tok = torch.where(finished, torch.full_like(tok, pad_token_id), tok)
        tokens.append(tok)
        logprobs.append(logp.gather(-1, tok[:, None]).squeeze(-1))
        finished |= tok == eos_token_id
        if bool(finished.all()):
            break
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        out = model(
            input_ids=tok[:, None], attention_mask=attn, position_ids=next_pos, past_key_values=past, use_cache=True
        )
        past, logits = out.past_key_values, out.logits[:, -1].float()
        next_pos = next_pos + 1
    ids = torch.stack(tokens, dim=1)
    return (ids, torch.stack(logprobs, dim=1).float()) if return_logprobs else ids


def response_mask_after_eos(response_ids: Tensor, eos_token_id: int) -> tuple[Tensor, Tensor]:  # (B, T) -> (B, T), (B,)
    """True up to and including the first EOS (truncate after EOS, §5 A3); also whether each row has an EOS."""
    is_eos = response_ids == eos_token_id
    after_eos = (is_eos.long().cumsum(dim=1) - is_eos.long()) > 0
    return ~after_eos, is_eos.any(dim=1)
