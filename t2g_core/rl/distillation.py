"""Self-distillation credit: how far a teacher that has read a critique c disagrees with the student, token by token
(SDPO, Huebotter et al. 2026, "Reinforcement Learning via Self-Distillation"), as rewards PPO's estimators accept.

With p_t = pi_theta(. | x, y_<t) the student (the rollout policy, the prompt alone) and q_t = pi_T(. | x, c, y_<t) the
teacher (the prompt and the critique), the log-ratio of a candidate v at position t is

    l_t(v) = log q_t(v) - log p_t(v)

**sampled** (``top_k`` 0): the credit of the sampled token is l_t(y_t), SDPO's token-level advantage. As a reward,
sum_t l_t(y_t) is a one-sample estimate of -KL(pi_theta || pi_T) over the sequence, as the k1 KL penalty is of the KL
to the reference; E[l_t(y_t) | s_t] = -KL(p_t || q_t) <= 0.

**top-k** (``top_k`` k): on the student's k most likely tokens K_t plus one tail bucket holding the rest of each
model's mass (the distributions stay whole, so k = V is exact), the reverse KL

    KL_t = sum_{v in K_t} p_t(v) (log p_t(v) - log q_t(v)) + P_t (log P_t - log Q_t),   P, Q = the tail masses

and the sampled token's log-ratio on that support, l_t(y_t) (the tail's log-ratio when y_t is outside K_t). The
credit splits into a state part, -KL_t, a reward every estimator propagates to the tokens before t, and an own part,
e_t = l_t(y_t) + KL_t (zero mean given s_t), added to token t's advantage alone. Their sum at t is l_t(y_t), so the
expected return is the sampled credit's, while the tokens before t see the expectation -KL_t instead of a one-sample
l_t: a Rao-Blackwellised estimate of the same gradient (with the tail bucket, in the limit k = V, exactly).

Deliberate deviation from the paper: SDPO's logit-level loss trains every candidate's logit through
sum_v p(v) grad log p(v) l(v). PPO trains only through the sampled tokens' ratio, so here the top-k distributions
enter as the baseline KL_t and the state reward, never as a loss on unsampled logits.

**Clipped and judged**: the credit g_t = clip(l_t(y_t), -c, c), then (``judge``) min(g_t, 0) on a token the critic
labelled poor and max(g_t, 0) on one it labelled good: the teacher never moves a token by more than c, nor reverses
the critic's judgement of a token it judged (an adversarial critique cannot pay for what the critic calls poor). The
judge only removes credit that contradicts a label, never adds any; but on a teacher that does not read the critique
it turns noise into a weak copy of the labels, which is why it can be switched off to measure the teacher alone.
The reward is r_t += w g_t (sampled), or r_t += w max(-KL_t, -c) with w (g_t - max(-KL_t, -c)) on token t's
advantage (top-k).

**Placement** (``placement``): as rewards (above), the credit reaches the tokens before t through the estimator's
return, and its sum, an estimate of -KL(pi_theta || pi_T) over the sequence, is smaller for shorter responses
wherever the teacher differs from the student at all: with nothing else to pay for length (``mode: replace``, no
omission rewards) it teaches the policy to stop. ``advantage`` is SDPO's own credit: A_t += w g_t on token t alone
(top-k: w (g_t - max(-KL_t, -c)), the state part being a baseline there), which no return and no other token sees.
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
