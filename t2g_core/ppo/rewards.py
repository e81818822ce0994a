"""Span rewards, steps 2 (score) and 3 (place span rewards) of a PPO step: decode the rollout's responses (no
re-encoding), critique them with the reward source, label their tokens, and turn the labels into the task reward s_t
(B, T) and a terminal reward (B,)."""

from __future__ import annotations

import torch
from torch import Tensor

from t2g_core.config.align import AlignConfig
from t2g_core.config.ppo import HYBRID_MODES, PPOConfig
from t2g_core.ppo.rollout import Rollout
from t2g_core.ppo.scoring import RewardSource, ScoredResponse, decode_responses, label_responses
from t2g_core.rl import omission_labels, task_rewards, unit_label_sums
from t2g_core.spans import ParsedFeedback


def decode(ro: Rollout, tokenizer) -> list[tuple[str, list[tuple[int, int]]]]:
    """Each response's text and the char offsets of its sampled ids (no re-encoding)."""
    ids = [r[m].tolist() for r, m in zip(ro.response_ids, ro.response_mask, strict=True)]
    return decode_responses(ids, tokenizer, tokenizer.eos_token_id)


def critique(ro: Rollout, decoded, reward_source: RewardSource) -> list[ParsedFeedback]:
    return reward_source.critique_batch(
        [{**row, "response": text} for row, (text, _) in zip(ro.rows, decoded, strict=True)]
    )


def score(
    ro: Rollout, reward_source: RewardSource, tokenizer, align_cfg: AlignConfig | None, *, words: bool = False
) -> list[ScoredResponse]:
    """decode -> critique -> label (the PPO step runs and times the three parts apart)."""
    decoded = decode(ro, tokenizer)
    return label_responses(decoded, critique(ro, decoded, reward_source), align_cfg, words=words)


def labels_tensor(scored: list[ScoredResponse], shape: tuple[int, int]) -> Tensor:  # -> (B, T) delta_t
    out = torch.zeros(shape, dtype=torch.float32)
    for b, s in enumerate(scored):
        out[b, : len(s.labels)] = torch.tensor(s.labels, dtype=torch.float32)
    return out


def missing_tensor(scored: list[ScoredResponse], shape: tuple[int, int], placed: bool) -> Tensor:  # -> (B, T)
    """How many missing items each sampled token is the anchor of; ``placed``: only the items the critic gave a place
    (those it gave none sit on the last token, where they are taken off again)."""
    out = torch.zeros(shape, dtype=torch.float32)
    for b, s in enumerate(scored):
        for k in s.missing_tokens:
            out[b, min(k, shape[1] - 1)] += 1.0
        if placed and s.unanchored:
            out[b, min(max(len(s.labels) - 1, 0), shape[1] - 1)] -= float(s.unanchored)
    return out


def place_task_rewards(scored: list[ScoredResponse], ro: Rollout, cfg: PPOConfig) -> tuple[Tensor, Tensor, Tensor]:
    """Task reward s_t (B, T), terminal reward (B,), and the labels delta (B, T) after failure handling, in the order
    of :mod:`t2g_core.rl.rewards`. Where rewards are placed on tokens (span, dense), an omission the critic gave no
    place (or every omission, ``omission_placement=end``) joins the terminal, so every estimator credits it to the
    whole response. With ``self_distillation.mode: replace`` the labels, omissions and verdict weigh 0."""
    if cfg.self_distillation.mode == "replace":
        cfg = cfg.model_copy(update={"span_coef": 0.0, "outcome_coef": 0.0})
    mask = ro.response_mask
    fbs = [s.feedback for s in scored]
    labels = labels_tensor(scored, tuple(mask.shape))
    per_token = cfg.reward_mode in HYBRID_MODES
    placed = missing_tensor(scored, tuple(mask.shape), placed=per_token)
    if per_token and cfg.omission_placement == "end":
        placed = torch.zeros_like(placed)
    total = torch.tensor([float(len(s.missing_tokens)) for s in scored])
    omitted = omission_labels(placed, mask, cfg.omission_penalty, "anchor")
    unplaced = -cfg.omission_penalty * (total - placed.sum(dim=1))  # (B,) the terminal's share of the omissions
    failed = torch.tensor([not fb.ok for fb in fbs])
    has_verdict = torch.tensor([fb.ok and fb.outcome is not None for fb in fbs])
    verdict = torch.tensor([float(fb.outcome) if fb.ok and fb.outcome is not None else 0.0 for fb in fbs])
    degenerate = torch.tensor([fb.ok and fb.degenerate for fb in fbs])
    labels = torch.where(has_verdict[:, None], unit_label_sums(labels, mask), labels)
    no_eos = ~ro.has_eos if cfg.missing_eos_penalty is not None else torch.zeros_like(failed)
    keep = (~(failed | no_eos | degenerate)).to(labels.dtype)
    labels, signal = labels * keep[:, None], (labels + omitted) * keep[:, None]
    task = task_rewards(cfg.reward_mode, signal, mask, cfg.span_coef)
    hybrid = cfg.terminal_coef if cfg.reward_mode in HYBRID_MODES else 0.0  # scalar/uniform: already the reward
    unplaced = unplaced * keep
    terminal = (1 + hybrid) * cfg.span_coef * unplaced + hybrid * cfg.span_coef * (signal * mask).sum(dim=1)
    terminal = terminal + cfg.outcome_coef * verdict * keep
    terminal = torch.where(failed, torch.full_like(terminal, cfg.parse_failure_reward), terminal)
    if cfg.missing_eos_penalty is not None:
        terminal = torch.where(no_eos & ~failed, torch.full_like(terminal, cfg.missing_eos_penalty), terminal)
    return task, torch.where(degenerate, torch.full_like(terminal, cfg.degenerate_reward), terminal), labels
