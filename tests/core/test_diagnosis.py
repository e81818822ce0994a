"""Plateau diagnosis and reward-model drift on hand-made demo summaries, against hand counts."""

from __future__ import annotations

import pytest

from t2g_core.demo.summarization import SLOTS, reference_summary, render_summary
from t2g_core.evaluation.diagnosis import fact_error_profile, fact_verdicts, poor_span_agreement
from t2g_core.spans import ParsedFeedback
from tests.core._facts import CAI

FACTS = CAI
# city invented (Lima is none of the post's values), day and food swapped, job left out, the name clause repeated
FLAWED = render_summary(
    {**FACTS, "city": "Lima", "day": "beans", "food": "Sunday", "job": None}, FACTS, repeat=("name",)
).text


def test_fact_verdicts_name_each_kind_of_error():
    verdicts, repeats = fact_verdicts(FLAWED, FACTS)
    assert verdicts == {
        "name": "correct",
        "city": "invented",
        "count": "correct",
        "pet": "correct",
        "color": "correct",
        "job": "missing",
        "day": "swapped",
        "food": "swapped",
    }
    assert repeats == 1
    assert fact_verdicts(reference_summary(FACTS), FACTS) == (dict.fromkeys(SLOTS, "correct"), 0)


def test_fact_error_profile_by_hand():
    out = fact_error_profile([(FACTS, FLAWED), (FACTS, reference_summary(FACTS))])
    assert out["n"] == 2 and out["redundant_mean"] == 0.5
    assert out["slots"]["city"] == {"correct": 0.5, "invented": 0.5, "swapped": 0.0, "missing": 0.0}
    assert out["slots"]["day"] == {"correct": 0.5, "invented": 0.0, "swapped": 0.5, "missing": 0.0}
    assert out["slots"]["job"]["missing"] == 0.5 and out["slots"]["name"]["correct"] == 1.0
    # 16 slots: 12 correct, 1 invented, 2 swapped, 1 missing
    assert out["total"] == {"correct": 12 / 16, "invented": 1 / 16, "swapped": 2 / 16, "missing": 1 / 16}
    with pytest.raises(ValueError, match="at least one"):
        fact_error_profile([])


def test_poor_span_agreement_by_hand():
    texts = ["the cat sat on the mat", "a dog ran"]
    pred = [ParsedFeedback("x", poor_spans=["cat sat", "mat"]), ParsedFeedback("x", poor_spans=["dog"])]
    ref = [ParsedFeedback("x", good_spans=["mat"], poor_spans=["cat sat"]), ParsedFeedback("x", poor_spans=["ran"])]
    out = poor_span_agreement(texts, pred, ref)
    # spans: "cat sat" matches; "mat" (reference: good) and "dog" (reference: "ran") do not -> 1 of 3 predicted,
    # 1 of 2 reference; chars: 7 hits, 7 + 3 + 3 = 13 predicted, 7 + 3 = 10 reference
    assert out["span_precision"] == pytest.approx(1 / 3) and out["span_recall"] == pytest.approx(1 / 2)
    assert out["span_f1"] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert out["char_precision"] == pytest.approx(7 / 13) and out["char_recall"] == pytest.approx(7 / 10)
    assert out["n"] == 2 and out["reference_spans"] == 2 and out["predicted_spans"] == 3


def test_poor_span_agreement_uses_located_spans_and_counts_a_failed_critique_as_no_spans():
    texts = ["the cat sat"]
    located = ParsedFeedback("x", located=((4, 7, "negative"), (0, 3, "positive")))
    assert poor_span_agreement(texts, [located], [ParsedFeedback("x", poor_spans=["cat"])])["span_f1"] == 1.0
    failed = ParsedFeedback(None, status="parse_error", error="bad json")
    out = poor_span_agreement(texts, [failed], [ParsedFeedback("x", poor_spans=["cat"])])
    assert out["span_recall"] == 0.0 and out["char_recall"] == 0.0
    assert poor_span_agreement(texts, [failed], [ParsedFeedback("x")])["span_f1"] == 1.0  # nothing to find
    with pytest.raises(ValueError, match="1 responses, 2 predictions"):
        poor_span_agreement(texts, [failed, failed], [failed])
