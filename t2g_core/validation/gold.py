"""Spans against ground truth (feedback ``meta.gold_spans``), by overlap.

A predicted span is correct when it overlaps (shares at least one character with) a gold span of the same label;
an unmatched quote is never correct. A gold span is found when some predicted span of its label overlaps it.
Precision = correct predictions / predictions, recall = found gold spans / gold spans (the "partial match"
convention of the paper's span metrics). The programmatic reviewer judges spans with the same rule.
"""

from __future__ import annotations

import pandas as pd

from t2g_core.validation.batch import Batch, GoldSpan


def overlaps(start: int | None, end: int | None, label: str, gold: list[GoldSpan]) -> bool:
    """Does the span [start, end) of ``label`` overlap a gold span of that label? Unmatched spans never do."""
    if start is None or end is None or pd.isna(start) or pd.isna(end):
        return False
    return any(g.label == label and g.start < end and start < g.end for g in gold)


def item_counts(spans: pd.DataFrame, gold: list[GoldSpan]) -> dict:
    """True positives on both sides and the item's F1 (1.0 when both sides are empty)."""
    pred = [(s, e, lab) for s, e, lab in zip(spans["start"], spans["end"], spans["label"], strict=True)]
    tp_pred = sum(overlaps(s, e, lab, gold) for s, e, lab in pred)
    matched = [(int(s), int(e), lab) for s, e, lab in pred if pd.notna(s) and pd.notna(e)]
    tp_gold = sum(any(lab == g.label and s < g.end and g.start < e for s, e, lab in matched) for g in gold)
    p = tp_pred / len(pred) if pred else 1.0
    r = tp_gold / len(gold) if gold else 1.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return {"tp_pred": tp_pred, "n_pred": len(pred), "tp_gold": tp_gold, "n_gold": len(gold), "f1": round(f1, 4)}


def item_gold_counts(b: Batch) -> list[dict]:
    """One row per item with ground truth: id plus the counts of :func:`item_counts`."""
    by_id = dict(tuple(b.spans.groupby("id")))
    rows = []
    for r in b.items.drop_duplicates("id").itertuples():
        if r.gold is None:
            continue
        rows.append({"id": r.id, **item_counts(by_id.get(r.id, b.spans.iloc[:0]), r.gold)})
    return rows
