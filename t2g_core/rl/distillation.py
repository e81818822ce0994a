"""Self-distillation credit: how far a teacher that has read a critique c disagrees with the student, token by token
(SDPO, Huebotter et al. 2026, "Reinforcement Learning via Self-Distillation"), as rewards PPO's estimators accept.

With p_t the student (the rollout policy, the prompt alone) and q_t the teacher (the prompt and the critique c), the
credit of token t is built from l_t(v) = log q_t(v) - log p_t(v): the sampled token's l_t(y_t), or (top-k) a state
part -KL_t(p || q) on the student's top-k support plus a tail bucket and an own part l_t(y_t) + KL_t; clipped at c and
(``judge``) never against the critic's label of the token. docs/ppo.md, "Self-distillation", has the equations and
why the top-k credit is a reward and an own-token term.
"""

from __future__ import annotations

import torch
from torch import Tensor


def sampled_credit(teacher_logprobs: Tensor, logprobs: Tensor, mask: Tensor) -> Tensor:  # (B, T) x3 -> (B, T)
    """l_t(y_t) = log q_t(y_t) - log p_t(y_t) on valid tokens (0 elsewhere)."""
    return (teacher_logprobs - logprobs) * mask.to(logprobs.dtype)


@torch.no_grad()
def topk_credit(
    logits: Tensor, teacher_logits: Tensor, ids: Tensor, k: int, temperature: float = 1.0
) -> tuple[Tensor, Tensor]:  # (N, V), (N, V), (N,) -> (N,), (N,)
    """On the student's top-``k`` support plus a tail bucket, at ``temperature``: (l_t(y_t), KL_t(p || q))."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    logq = torch.log_softmax(teacher_logits.float() / temperature, dim=-1)
    top = torch.topk(logp, min(k, logp.shape[-1]), dim=-1).indices  # (N, k)
    lp_top, lq_top = logp.gather(-1, top), logq.gather(-1, top)
    outside = torch.full_like(logp, float("-inf"))
    lp_tail = torch.logsumexp(logp.scatter(-1, top, outside), dim=-1)  # log of the mass outside K_t, exactly
    lq_tail = torch.logsumexp(logq.scatter(-1, top, outside), dim=-1)
    tail = torch.isfinite(lp_tail)  # k = V: no tail
    kl = (lp_top.exp() * (lp_top - lq_top)).sum(-1)
    kl = kl + torch.where(tail, lp_tail.exp() * (lp_tail - lq_tail), torch.zeros_like(kl))
    in_top = (top == ids[:, None]).any(-1)
    sampled = (logq.gather(-1, ids[:, None]) - logp.gather(-1, ids[:, None])).squeeze(-1)
    return torch.where(in_top, sampled, lq_tail - lp_tail), kl


def judged_credit(
    credit: Tensor, labels: Tensor, mask: Tensor, clip: float, judge: bool = True
) -> Tensor:  # (B, T) x3 -> (B, T)
    """g_t: ``credit`` clipped to [-clip, clip]; with ``judge``, at most 0 on tokens labelled poor (< 0) and at least
    0 on tokens labelled good (> 0); 0 on padding."""
    g = credit.clamp(-clip, clip)
    if judge:
        g = torch.where(labels < 0, g.clamp(max=0.0), g)
        g = torch.where(labels > 0, g.clamp(min=0.0), g)
    return g * mask.to(g.dtype)


def credit_parts(
    judged: Tensor, kl: Tensor | None, mask: Tensor, clip: float, placement: str = "reward"
) -> tuple[Tensor, Tensor]:  # (B, T), (B, T) or None, (B, T) -> reward (B, T), own (B, T)
    """The judged credit as (a per-token reward, an own-token advantage term). As rewards: sampled credit (``kl``
    None) is all reward; top-k credit is the state reward max(-KL_t, -clip) and the rest of g_t on token t's
    advantage. As advantages: no reward; sampled, g_t; top-k, g_t less the state part (a baseline)."""
    state = judged if kl is None else (-kl).clamp(min=-clip) * mask.to(judged.dtype)
    if placement == "advantage":
        return torch.zeros_like(judged), judged if kl is None else judged - state
    if placement != "reward":
        raise ValueError(f"unknown placement {placement!r}; expected 'reward' or 'advantage'")
    return state, judged - state
