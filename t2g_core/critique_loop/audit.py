"""What a round of the critique loop measures: which rollouts it annotates, the annotator's labels as feedback, and how
far the reward model and the annotator agree on the same responses."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from t2g_core.annotators import annotate
from t2g_core.config.align import AlignConfig
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.feedback import responses_frame
from t2g_core.ppo.hooks import Decoded
from t2g_core.ppo.scoring import label_responses
from t2g_core.reward_model.data import annotation_missing
from t2g_core.reward_model.evaluate import EvalItem, score_predictions
from t2g_core.schemas import ANNOTATIONS, FEEDBACK
from t2g_core.spans import ParsedFeedback
from t2g_core.store import write_parquet
from t2g_core.training import epoch_permutation


def choose(confidence: Sequence[float | None], budget: int, uncertain_share: float, seed: int, step: int) -> list[int]:
    """Indices of the rollouts a round annotates: the ``round(budget * uncertain_share)`` least confident (none without
    confidences), then the rest at random (keyed by (seed, step)), last: they alone measure unbiased agreement."""
    n = len(confidence)
    budget = min(budget, n)
    known = all(c is not None for c in confidence)
    n_unsure = round(budget * uncertain_share) if known else 0
    unsure = sorted(range(n), key=lambda i: (confidence[i], i))[:n_unsure]
    others = [i for i in range(n) if i not in set(unsure)]
    drawn = epoch_permutation(len(others), seed, 1_000_003 + step)[: budget - n_unsure].tolist()
    return unsure + [others[k] for k in drawn]


def feedback_frame(rows: list[dict], texts: list[str], tag: str, picked: list[int]) -> pd.DataFrame:
    """The chosen responses as feedback items (schema FEEDBACK), ids unique per ``tag`` and sample."""
    chosen = ((rows[b], f"{rows[b]['id']}@{tag}.{b}", texts[b], rows[b].get("meta")) for b in picked)
    return responses_frame(chosen, f"critique loop, {tag}")


def annotation_feedback(annotations: pd.DataFrame) -> list[ParsedFeedback]:
    """The annotator's rows as feedback (quotes, critique, missing items and where each belonged)."""
    out = []
    for a in annotations.itertuples(index=False):
        missing = annotation_missing(a)
        out.append(
            ParsedFeedback(
                a.critique,
                list(a.good_spans),
                list(a.poor_spans),
                status=a.status,
                error=a.error,
                missing=tuple(m for m, _ in missing),
                missing_at=tuple(at for _, at in missing),
            )
        )
    return out


def annotate_into(
    items: pd.DataFrame, folder: Path, cfg: AnnotateConfig, *, api_key: str | None, cache_dir: Path
) -> pd.DataFrame:
    """The annotator's rows for ``items`` (its cache in ``cache_dir``); both written to ``folder``."""
    run = annotate(items, cfg, api_key=api_key, cache_dir=cache_dir, progress=False)
    write_parquet(items, folder / "feedback.parquet", FEEDBACK)
    write_parquet(run.frame, folder / "annotations.parquet", ANNOTATIONS)
    return run.frame


def task_rewards(
    decoded: Decoded, feedback: list[ParsedFeedback], align_cfg: AlignConfig | None, omission_penalty: float
) -> list[float]:
    """Each response's task reward under PPO's labelling rules: its labels' sum minus the omissions' penalty."""
    scored = label_responses(decoded, feedback, align_cfg)
    return [sum(s.labels) - omission_penalty * len(s.missing_tokens) for s in scored]


def agreement(
    decoded: Decoded,
    model_feedback: list[ParsedFeedback],
    annotator_feedback: list[ParsedFeedback],
    tokenizer,
    align_cfg: AlignConfig | None,
    omission_penalty: float,
) -> dict[str, float]:
    """How far the reward model agrees with the annotator on the same responses: span F1 (both labels, and poor
    spans), omission recall and precision, and the mean task reward each gives (with the annotator's standard error)."""
    pairs = enumerate(zip(decoded, annotator_feedback, strict=True))
    items = [EvalItem(str(i), "", text, gold) for i, ((text, _), gold) in pairs]
    metrics, _ = score_predictions(items, model_feedback, tokenizer, align_cfg=align_cfg)
    penalty = omission_penalty
    rm, annotator = (task_rewards(decoded, f, align_cfg, penalty) for f in (model_feedback, annotator_feedback))
    n = max(len(decoded), 1)
    return {
        "f1": metrics["span_f1"],
        "poor_f1": metrics.get("span_negative_f1", 1.0),
        "omission_recall": metrics.get("omission_recall", 1.0),
        "omission_precision": metrics.get("omission_precision", 1.0),
        "rm_reward": sum(rm) / n,
        "annotator_reward": sum(annotator) / n,
        "annotator_reward_se": statistics.stdev(annotator) / math.sqrt(n) if n > 1 else 0.0,
    }
