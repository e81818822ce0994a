"""Alignment metrics: how well quoted spans were placed, and how predicted spans compare with gold spans.

- :func:`alignment_stats`: unmatched-span rate, match-type mix, label mix of a ``spans`` frame and, given the
  responses, the fraction of response characters (and, with token labels, tokens) that carry a label.
- :func:`label_stats`: fraction of tokens labelled and the positive/negative balance of token label vectors.
- :func:`span_prf`: span-level precision / recall / F1 where a predicted span counts when it has the gold span's
  label and IoU >= ``iou_threshold`` (one-to-one, best IoU first), plus the mean IoU of the matched pairs.
- :func:`token_prf`: token-level (or character-level) precision / recall / F1 and IoU of signed labels.

Conventions: when there is nothing to find and nothing was predicted, precision = recall = F1 = IoU = 1.0 (a
perfect outcome); counts (``tp``, ``n_pred``, ``n_gold``) are always returned so callers can micro-average with
:func:`micro_prf`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from t2g_core.schemas import MATCHES

Span = tuple[int, int, str]  # (start, end, label), half-open char offsets


def _prf(tp: float, n_pred: float, n_gold: float) -> dict[str, float]:
    precision = tp / n_pred if n_pred else (1.0 if not n_gold else 0.0)
    recall = tp / n_gold if n_gold else (1.0 if not n_pred else 0.0)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "n_pred": n_pred, "n_gold": n_gold}


def micro_prf(results: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Micro-average several :func:`span_prf` / :func:`token_prf` results by summing their counts."""
    tp = n_pred = n_gold = 0.0
    for r in results:
        tp, n_pred, n_gold = tp + r["tp"], n_pred + r["n_pred"], n_gold + r["n_gold"]
    out = _prf(tp, n_pred, n_gold)
    union = n_pred + n_gold - tp
    out["iou"] = tp / union if union else 1.0
    return out


def iou(a: tuple[int, int], b: tuple[int, int]) -> float:
    """Intersection over union of two half-open intervals."""
    inter = max(0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 0 else 0.0


def span_prf(pred: Sequence[Span], gold: Sequence[Span], *, iou_threshold: float = 0.5) -> dict[str, float]:
    """Span-level P/R/F1: a predicted span is a hit when it has a gold span's label and IoU >= ``iou_threshold``."""
    pairs = sorted(
        (
            (iou((p[0], p[1]), (g[0], g[1])), i, j)
            for i, p in enumerate(pred)
            for j, g in enumerate(gold)
            if p[2] == g[2]
        ),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    used_p: set[int] = set()
    used_g: set[int] = set()
    ious: list[float] = []
    for score, i, j in pairs:
        if score < iou_threshold or score <= 0:
            break
        if i in used_p or j in used_g:
            continue
        used_p.add(i)
        used_g.add(j)
        ious.append(score)
    out = _prf(len(ious), len(pred), len(gold))
    out["mean_iou"] = sum(ious) / len(ious) if ious else (1.0 if not pred and not gold else 0.0)
    return out


def token_prf(pred: Sequence[float], gold: Sequence[float]) -> dict[str, Any]:
    """Token-level P/R/F1 and IoU of labelled tokens: a hit is a token labelled with the same sign in both.

    ``pred`` and ``gold`` are label vectors of one length (e.g. :func:`t2g_core.spans.token_labels` outputs, or one
    entry per character). Also reports the same figures per sign under ``positive`` and ``negative``.
    """
    if len(pred) != len(gold):
        raise ValueError(f"token_prf: {len(pred)} predicted labels but {len(gold)} gold labels")
    out: dict[str, Any] = {}
    for name, sign in (("positive", 1), ("negative", -1)):
        p = [_sign(x) == sign for x in pred]
        g = [_sign(x) == sign for x in gold]
        out[name] = _set_prf(p, g)
    out.update(
        _set_prf(
            [_sign(x) != 0 for x in pred],
            [_sign(x) != 0 for x in gold],
            [_sign(a) == _sign(b) != 0 for a, b in zip(pred, gold, strict=True)],
        )
    )
    return out


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _set_prf(p: Sequence[bool], g: Sequence[bool], hit: Sequence[bool] | None = None) -> dict[str, float]:
    hits = sum(hit) if hit is not None else sum(a and b for a, b in zip(p, g, strict=True))
    n_pred, n_gold = sum(p), sum(g)
    out = _prf(hits, n_pred, n_gold)
    union = n_pred + n_gold - hits
    out["iou"] = hits / union if union else 1.0
    return out


def label_stats(label_vectors: Iterable[Sequence[float]]) -> dict[str, float]:
    """Fraction of tokens labelled, positive and negative fractions, and balance = positive / labelled."""
    n = pos = neg = 0
    for labels in label_vectors:
        n += len(labels)
        pos += sum(1 for x in labels if x > 0)
        neg += sum(1 for x in labels if x < 0)
    return {
        "tokens": float(n),
        "labelled_token_frac": (pos + neg) / n if n else 0.0,
        "positive_token_frac": pos / n if n else 0.0,
        "negative_token_frac": neg / n if n else 0.0,
        "label_balance": pos / (pos + neg) if pos + neg else 0.0,
    }


def alignment_stats(
    spans_df: pd.DataFrame,
    responses: Mapping[str, str] | None = None,
    token_label_vectors: Iterable[Sequence[float]] | None = None,
) -> dict[str, float]:
    """Summary of a ``spans`` frame: counts, unmatched rate, match-type and label mix, coverage.

    With ``responses`` (id -> text) it adds ``labelled_char_frac`` (chars covered by a matched span over all
    response chars, items without spans included); with token label vectors, :func:`label_stats`.
    """
    n = len(spans_df)
    out: dict[str, float] = {"n_spans": float(n), "n_items_with_spans": float(spans_df["id"].nunique()) if n else 0.0}
    counts = spans_df["match"].value_counts().to_dict() if n else {}
    for m in MATCHES:
        out[f"match_{m}_frac"] = counts.get(m, 0) / n if n else 0.0
    out["unmatched_rate"] = out["match_unmatched_frac"]
    out["positive_span_frac"] = float((spans_df["label"] == "positive").mean()) if n else 0.0
    if responses is not None:
        out["labelled_char_frac"] = _char_coverage(spans_df, responses)
    if token_label_vectors is not None:
        out.update(label_stats(token_label_vectors))
    return out


def _char_coverage(spans_df: pd.DataFrame, responses: Mapping[str, str]) -> float:
    total = sum(len(r) for r in responses.values())
    covered = 0
    matched = spans_df[spans_df["start"].notna()] if len(spans_df) else spans_df
    for item_id, group in matched.groupby("id"):
        chars = bytearray(len(responses.get(item_id, "")))
        for start, end in zip(group["start"], group["end"], strict=True):
            chars[int(start) : int(end)] = b"\x01" * max(0, min(len(chars), int(end)) - int(start))
        covered += sum(chars)
    return covered / total if total else 0.0
