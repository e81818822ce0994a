"""Reference-free evaluation: every held-out response scored by the reward model the policy learnt from.

Feedback without references has no gold answer, but the policies can still be compared item by item by what the
trained reward model finds: ``rm_poor_spans`` (lower is better) and ``rm_reward`` (good minus poor spans). Both get a
paired-bootstrap interval against the policy before PPO. A policy can learn to please its reward model without being
better, so a judge or references are stronger evidence where they exist; an unscored response is NaN, never zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from t2g_core.spans import NEGATIVE, POSITIVE, align_feedback

REWARD_METRICS = ("rm_reward", "rm_poor_spans")


def span_reward(response: str, feedback: Any) -> dict[str, float]:
    """``rm_reward`` and ``rm_poor_spans`` of one response from the reward model's ParsedFeedback (its spans located
    in the response; spans it quotes that are not there do not count)."""
    if not feedback.ok:
        return dict.fromkeys(REWARD_METRICS, float("nan"))
    located = [s for s in align_feedback(response, feedback) if s.start is not None]
    good = sum(s.label == POSITIVE for s in located)
    poor = sum(s.label == NEGATIVE for s in located)
    return {"rm_reward": float(good - poor), "rm_poor_spans": float(poor)}


def reward_scores(scorer: Any, task: str, prompts: Sequence[str], responses: Sequence[str]) -> list[dict[str, float]]:
    """One :func:`span_reward` per response, scored by ``scorer`` (``critique_batch(rows)``: a reward-model scorer)."""
    rows = [{"task": task, "prompt": p, "response": r} for p, r in zip(prompts, responses, strict=True)]
    feedback = scorer.critique_batch(rows) if rows else []
    return [span_reward(row["response"], fb) for row, fb in zip(rows, feedback, strict=True)]


def add_reward_scores(items: pd.DataFrame, scorer: Any, task: str) -> pd.DataFrame:
    """``items`` (one row per policy, item and sample) with the :data:`REWARD_METRICS` columns added."""
    scores = reward_scores(scorer, task, items["prompt"].tolist(), items["response"].tolist())
    out = items.copy()
    for name in REWARD_METRICS:
        out[name] = np.array([s[name] for s in scores], dtype=float) if scores else np.array([], dtype=float)
    return out
