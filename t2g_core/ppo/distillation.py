"""Self-distillation credit in a PPO step (``ppo.self_distillation``; the credit: :mod:`t2g_core.rl.distillation`):
each rollout's critique, the teacher's prompt, the teacher pass, the credit as rewards, and the EMA teacher.

The critique is the one the step's reward already paid for (rendered from the spans when the feedback has no text); a
rollout whose critique failed gets no credit. The teacher reads the policy's prompt with ``template`` appended, over
the rollout's sampled ids, unchanged, without gradients; the student never sees the critique (docs/ppo.md,
"Self-distillation").
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor

from t2g_core.config.ppo import PPOConfig
from t2g_core.config.self_distillation import CRITIQUE, SelfDistillation
from t2g_core.policy_prompts import policy_messages
from t2g_core.ppo.distributed import global_sum, to_device
from t2g_core.ppo.models import TEACHER_ADAPTER, active_adapter, ema_adapter, forward_in_micro_batches
from t2g_core.ppo.rollout import Rollout
from t2g_core.ppo.scoring import ScoredResponse
from t2g_core.reward_model.tagger import critique_from_spans
from t2g_core.rl.distillation import credit_parts, judged_credit, sampled_credit, topk_credit
from t2g_core.spans import NEGATIVE, POSITIVE, ParsedFeedback

MAX_CRITIQUE_CHARS = 2000  # a longer critique is cut: no reward source can grow the teacher's prompt without bound


def critique_text(text: str, fb: ParsedFeedback) -> str | None:
    """The critique the teacher reads for response ``text``: the feedback's own, else one rendered from its spans and
    missing items, else None (a failed critique, or one that says nothing)."""
    if not fb.ok:
        return None
    if fb.critique and fb.critique.strip():
        return fb.critique.strip()[:MAX_CRITIQUE_CHARS]
    spans = list(fb.located) or [
        (at, at + len(q), label)
        for label, quotes in ((POSITIVE, fb.good_spans), (NEGATIVE, fb.poor_spans))
        for q in quotes
        if q and (at := text.find(q)) >= 0
    ]
    if not spans and not fb.missing:
        return None
    return critique_from_spans(text, sorted(spans), fb.missing)[:MAX_CRITIQUE_CHARS]


def teacher_prompt(tokenizer, row: dict, critique: str, template: str) -> str:
    """The policy's prompt for ``row`` with ``template`` (the critique in it) appended to its user turn, rendered
    with the chat template and ending with the assistant's generation prompt (tokenize without special tokens)."""
    messages = policy_messages(row["task"], row["prompt"])
    last = messages[-1]
    messages[-1] = {**last, "content": last["content"] + template.replace(CRITIQUE, critique)}
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


@dataclass
class Teaching:
    """What the teacher said of one step's rollouts, (B, T) on the CPU: l_t(y_t) and, with top-k credit, KL_t."""

    ratio: Tensor
    kl: Tensor | None
    critiqued: Tensor  # (B,) bool: the rollouts that had a critique (the others get no credit)
    cfg: SelfDistillation


class Teacher:
    """The teacher of one PPO run: reads each rollout's critique (:meth:`read`)."""

    def __init__(self, cfg: PPOConfig, tokenizer):
        self.cfg, self.sd, self.tok = cfg, cfg.self_distillation, tokenizer

    def context(self, model):
        """The teacher's adapter (EMA), or the model as it is (policy; the reference disables the adapter)."""
        return active_adapter(model.policy, TEACHER_ADAPTER) if self.sd.teacher == "ema" else contextlib.nullcontext()

    @torch.no_grad()
    def read(self, model, ro: Rollout, scored: list[ScoredResponse], logprobs: Tensor, device) -> Teaching:
        """The teacher pass over the rollouts that have a critique (``logprobs``: the student's old log-probs); an
        EMA teacher first moves ``ema_rate`` towards the policy the last update left, so after step s it averages
        the policies of steps 0..s. ``model``: the plain module, its weights gathered and kept (FSDP)."""
        if self.sd.teacher == "ema":
            ema_adapter(model.policy, self.sd.ema_rate)
        critiques = [critique_text(s.text, s.feedback) for s in scored]
        rows = [b for b, c in enumerate(critiques) if c]
        critiqued = torch.tensor([c is not None for c in critiques], dtype=torch.bool)
        ratio, kl = torch.zeros_like(logprobs), (torch.zeros_like(logprobs) if self.sd.top_k else None)
        if not rows:
            return Teaching(ratio, kl, critiqued, self.sd)
        idx = torch.tensor(rows)
        texts = [teacher_prompt(self.tok, ro.rows[b], critiques[b], self.sd.template) for b in rows]
        enc = self.tok(texts, add_special_tokens=False, padding=True, return_tensors="pt")
        teacher_query = (enc["input_ids"], enc["attention_mask"].bool())
        response = (ro.response_ids[idx], ro.response_mask[idx])
        if not self.sd.top_k:
            with self.context(model):
                batch = to_device(device, *teacher_query, *response)
                reference, size = self.sd.teacher == "reference", self.cfg.micro_batch_size
                teacher, _ = forward_in_micro_batches(
                    model, *batch, self.cfg.sampling, micro_batch_size=size, reference=reference, with_values=False
                )
            ratio[idx] = sampled_credit(teacher.cpu().float(), logprobs[idx], response[1])
            return Teaching(ratio, kl, critiqued, self.sd)
        student_query = (ro.query_ids[idx], ro.query_mask[idx])
        ratio[idx], kl[idx] = self._topk(model, student_query, teacher_query, response, device)
        return Teaching(ratio, kl, critiqued, self.sd)

    def _topk(self, model, student_query, teacher_query, response, device) -> tuple[Tensor, Tensor]:
        """l_t(y_t) and KL_t on the student's top-k support, one chunk of each model's logits at a time."""
        n, size = response[0].shape[0], self.cfg.micro_batch_size or response[0].shape[0]
        own, kl = [], []
        for i in range(0, n, size):
            rows = slice(i, i + size)
            ids, mask = to_device(device, *(t[rows] for t in response))
            student = model.response_hidden(*to_device(device, *(t[rows] for t in student_query)), ids, mask)
            with self.context(model):
                teacher = model.response_hidden(
                    *to_device(device, *(t[rows] for t in teacher_query)), ids, mask, self.sd.teacher == "reference"
                )
            flat = [h.reshape(-1, h.shape[-1]) for h in (student, teacher)]
            head, chunk, parts = model.logits_head(), self.cfg.logprob_chunk_tokens, []
            for j in range(0, flat[0].shape[0], chunk):
                args = (head(flat[0][j : j + chunk]), head(flat[1][j : j + chunk]), ids.reshape(-1)[j : j + chunk])
                parts.append(topk_credit(*args, self.sd.top_k, self.cfg.sampling.temperature))
            m = mask.float()
            own.append((torch.cat([p[0] for p in parts]).reshape(ids.shape) * m).cpu())
            kl.append((torch.cat([p[1] for p in parts]).reshape(ids.shape) * m).cpu())
        return torch.cat(own), torch.cat(kl)


def distillation_rewards(
    teaching: Teaching | None, rewards: Tensor, labels: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor | None, dict[str, float]]:  # (B, T) x3 -> rewards (B, T), own (B, T) or None, metrics
    """r_t + w * (the judged credit's reward part), and w * its own-token part (added to token t's advantage); the
    metrics: the raw log-ratio and the credit per token, the share of rollouts critiqued, of tokens the judge moved."""
    if teaching is None:
        return rewards, None, {}
    sd, m = teaching.cfg, mask.float()
    judged = judged_credit(teaching.ratio, labels, mask, sd.clip, sd.judge)
    reward, own = credit_parts(judged, teaching.kl, mask, sd.clip, sd.placement)
    moved = ((judged - teaching.ratio).abs() > 1e-9).float() * m
    sums = [float(t.sum()) for t in (m, teaching.ratio * m, (reward + own) * m, teaching.critiqued, moved)]
    sums[2] *= sd.weight  # the credit as it enters the rewards
    n, tokens, ratio, credit, critiqued, changed = global_sum([float(len(m)), *sums])
    tokens = max(tokens, 1.0)
    metrics = {"sd/ratio": ratio / tokens, "sd/credit": credit / tokens, "sd/critiqued": critiqued / max(n, 1.0)}
    return rewards + sd.weight * reward, sd.weight * own, metrics | {"sd/judged": changed / tokens}
