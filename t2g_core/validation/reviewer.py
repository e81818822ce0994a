"""A programmatic reviewer that judges a review sample against ground truth, so the review path runs unattended.

Span: agree when it overlaps a gold span of its label (the rule of :mod:`t2g_core.validation.gold`).
Critique: acceptable when it is non-empty and the item's poor spans find every gold negative span and claim
nothing outside them (for a flawless item: no poor span at all). Items without ground truth are left unjudged.
"""

from __future__ import annotations

from t2g_core.review.models import ItemVerdict, ReviewItem, ReviewSample, ReviewVerdicts, SpanJudgement
from t2g_core.validation.batch import GoldSpan
from t2g_core.validation.gold import overlaps


def _critique_ok(item: ReviewItem, gold: list[GoldSpan]) -> bool:
    poor = [s for s in item.spans if s.label == "negative"]
    bad = [g for g in gold if g.label == "negative"]
    found_all = all(any(s.start is not None and s.start < g.end and g.start < s.end for s in poor) for g in bad)
    no_false_alarm = all(overlaps(s.start, s.end, "negative", gold) for s in poor)
    return bool(item.critique and item.critique.strip()) and found_all and no_false_alarm


def judge_item(item: ReviewItem, gold: list[GoldSpan]) -> ItemVerdict:
    spans = [
        SpanJudgement(span_index=s.span_index, agree=overlaps(s.start, s.end, s.label, gold), text=s.text)
        for s in item.spans
    ]
    critique = _critique_ok(item, gold) if item.critique is not None else None
    return ItemVerdict(id=item.id, spans=spans, critique_acceptable=critique, comment="judged against meta.gold_spans")


def ground_truth_review(sample: ReviewSample, gold_by_id: dict[str, list[GoldSpan] | None]) -> ReviewVerdicts:
    """Verdicts of the ground-truth reviewer on every sampled item that has ground truth."""
    items = [judge_item(it, gold_by_id[it.id]) for it in sample.items if gold_by_id.get(it.id) is not None]
    return ReviewVerdicts(reviewer="ground-truth", sample_key=sample.key, items=items)
