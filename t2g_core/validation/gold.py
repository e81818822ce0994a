"""Spans against ground truth (feedback ``meta.gold_spans``).

Span P/R/F1 is :func:`t2g_core.alignment.span_prf` on the item's located spans plus its unmatched quotes (never
right), micro-averaged. The programmatic reviewer is looser, like a human: a span is agreed with when it overlaps a
gold span of its label (:func:`overlaps`).
"""

from __future__ import annotations

import pandas as pd

from t2g_core.alignment import span_prf
from t2g_core.validation.batch import Batch, GoldSpan


def overlaps(start: int | None, end: int | None, label: str, gold: list[GoldSpan]) -> bool:
    """Does the span [start, end) of ``label`` overlap a gold span of that label? Unmatched spans never do."""
    if start is None or end is None or pd.isna(start) or pd.isna(end):
        return False
    return any(g.label == label and g.start < end and start < g.end for g in gold)


def item_prf(spans: pd.DataFrame, gold: list[GoldSpan]) -> dict:
    """``span_prf`` of one item, with its unmatched quotes counted as wrong predictions."""
    located = spans[spans["start"].notna() & spans["end"].notna()]
    pred = [(int(s), int(e), lab) for s, e, lab in zip(located["start"], located["end"], located["label"], strict=True)]
    res = span_prf(pred, [(g.start, g.end, g.label) for g in gold])
    n_pred = len(spans)
    p = res["tp"] / n_pred if n_pred else res["precision"]
    f1 = 2 * p * res["recall"] / (p + res["recall"]) if p + res["recall"] else 0.0
    rounded = {"precision": round(p, 4), "recall": round(res["recall"], 4), "f1": round(f1, 4)}
    return {"tp": res["tp"], "n_pred": n_pred, "n_gold": res["n_gold"], **rounded}


def item_gold_prf(b: Batch) -> list[dict]:
    """One row per item with ground truth: its id and :func:`item_prf`."""
    by_id = dict(tuple(b.spans.groupby("id")))
    rows = []
    for r in b.items.drop_duplicates("id").itertuples():
        if r.gold is None:
            continue
        rows.append({"id": r.id, **item_prf(by_id.get(r.id, b.spans.iloc[:0]), r.gold)})
    return rows
