"""Evaluation metrics and the paired bootstrap against hand-computed values."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from t2g_core.evaluation.bootstrap import paired_bootstrap
from t2g_core.evaluation.metrics import (
    critic_score,
    fact_metrics,
    pass_at_k,
    rouge_scores,
    sentence_bleu,
    summarization_metrics,
    task_metrics,
    token_f1,
)


def test_pass_at_k_hand_values():
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 - C(7,5)/C(10,5)
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # fewer failures than k: some draw always passes


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_the_binomial_formula(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 4)


def test_rouge_and_bleu_on_a_tiny_pair():
    # response: the cat sat on the mat / reference: the cat was on the mat
    # unigrams 5/6 shared; bigrams {the cat, on the, the mat} = 3 of 5; LCS "the cat on the mat" = 5 of 6
    scores = rouge_scores("the cat sat on the mat", "the cat was on the mat")
    assert scores == pytest.approx({"rouge1": 5 / 6, "rouge2": 3 / 5, "rougeL": 5 / 6})
    # BLEU: p1 5/6, p2 3/5, p3 1/4, p4 0/3 -> exp smoothing 1/(2*3); brevity penalty 1
    expected = 100 * (5 / 6 * 3 / 5 * 1 / 4 * 1 / 6) ** 0.25
    assert sentence_bleu("the cat sat on the mat", "the cat was on the mat") == pytest.approx(expected, rel=1e-6)
    assert sentence_bleu("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(100.0)


def _demo():
    return pytest.importorskip("t2g_core.demo.summarization")


def _facts(demo) -> dict[str, str]:
    return {slot: demo.VOCAB[slot][0] for slot in demo.SLOTS}


def test_fact_metrics_on_a_demo_summary():
    demo = _demo()
    facts = _facts(demo)
    assert len(facts) == 8
    stated = {**facts, "city": demo.VOCAB["city"][1], "job": demo.VOCAB["job"][1], "food": None}
    response = demo.render_summary(stated, facts).text
    out = fact_metrics(response, facts)
    # 7 values stated, 5 correct, 2 invented (city, job: values that are no fact of the post), food missing
    assert out == pytest.approx(
        {"fact_precision": 5 / 7, "fact_recall": 5 / 8, "invented_entity_rate": 2 / 7, "fact_error": 3 / 8}
    )
    assert fact_metrics(demo.reference_summary(facts), facts) == {
        "fact_precision": 1.0,
        "fact_recall": 1.0,
        "invented_entity_rate": 0.0,
        "fact_error": 0.0,
    }


def test_summarization_row_reads_meta_facts():
    import random

    demo = _demo()
    facts = _facts(demo)
    reference = demo.reference_summary(facts)
    response = demo.render_summary({**facts, "city": demo.VOCAB["city"][1]}, facts).text
    row = {
        "id": "sum-1",
        "prompt": demo.render_post(facts, random.Random(0)),
        "response": response,
        "reference": reference,
        "meta": json.dumps({"facts": facts}),
    }
    out = summarization_metrics(row)
    assert out["fact_recall"] == 7 / 8 and out["invented_entity_rate"] == pytest.approx(1 / 8)
    assert out["length_words"] == len(response.split()) and out["length_chars"] == len(response)
    assert 0.8 < out["rouge1"] < 1
    with pytest.raises(ValueError, match="sum-1.*meta"):
        summarization_metrics({**row, "meta": "{broken"})
    with pytest.raises(ValueError, match=r"sum-1.*meta.*\(nested too deeply\)"):  # not a RecursionError
        summarization_metrics({**row, "meta": "[" * 100_000})


@pytest.mark.parametrize("missing", [None, float("nan"), "", "  "])
def test_a_missing_reference_leaves_out_the_reference_metrics_instead_of_crashing(missing):
    """A Parquet null arrives as NaN (a float): the reference metrics are left out, the others still computed."""
    demo = _demo()
    facts = _facts(demo)
    row = {"id": "sum-1", "response": demo.reference_summary(facts), "reference": missing, "meta": {"facts": facts}}
    out = summarization_metrics(row)
    assert "rouge1" not in out and "bleu" not in out
    assert out["fact_error"] == 0.0 and out["length_words"] > 0
    qa_row = {"id": "qa-1", "task": "qa", "prompt": "q?", "response": "Paris", "reference": missing, "meta": None}
    (qa,) = task_metrics("qa", [qa_row])  # the reference critic reports "no reference" as a status, not a crash
    assert "token_f1" not in qa and math.isnan(qa["reference_score"])


def test_free_text_summaries_get_fact_metrics():
    demo = _demo()
    facts = _facts(demo)  # Ada, Paris, 2, dogs, gray, coach, Monday, beans
    free = "Ada, a coach in Paris, has two gray dogs, rests on Mondays and loves beans."
    assert fact_metrics(free, facts) == {
        "fact_precision": 1.0,
        "fact_recall": 1.0,
        "invented_entity_rate": 0.0,
        "fact_error": 0.0,
    }


def test_qa_token_f1_exact_match_and_critic_score():
    assert token_f1("Paris", "The city of Paris") == pytest.approx(2 * 1 * (1 / 3) / (1 + 1 / 3))
    assert token_f1("London", "Paris") == 0.0
    rows = [
        {"id": "qa-1", "prompt": "Capital of France?", "response": "The Paris.", "reference": "paris", "meta": None}
    ]
    out = task_metrics("qa", rows, critic=None)[0]
    assert out == {"token_f1": 1.0, "exact_match": 1.0}
    parsed = SimpleNamespace(good_spans=["a", "b", "c"], poor_spans=["d"], status="ok")  # a ParsedFeedback's fields
    assert critic_score(parsed) == 0.75
    assert math.isnan(critic_score(SimpleNamespace(good_spans=["a"], poor_spans=[], status="parse_error")))
    assert critic_score(SimpleNamespace(good_spans=[], poor_spans=[], status="ok")) == 0.0


def test_qa_uses_the_reference_critic():
    pytest.importorskip("t2g_core.critics.reference")
    rows = [
        {
            "id": "qa-1",
            "task": "qa",
            "prompt": "Where does Cai live?",
            "reference": "Cai lives in Quito.",
            "meta": None,
            "response": r,
        }
        for r in ("Cai lives in Quito.", "Cai lives in Lima.")
    ]
    right, wrong = task_metrics("qa", rows)
    assert right["reference_score"] == 1.0 and wrong["reference_score"] < 1.0


def test_unknown_task_is_rejected():
    with pytest.raises(ValueError, match="unknown task 'poetry'"):
        task_metrics("poetry", [])


# ------------------------------------------------------------------------------------------------ bootstrap
def test_bootstrap_constant_difference_has_a_point_interval():
    a = np.linspace(0, 1, 30)
    res = paired_bootstrap(a, a + 0.25, n=500, seed=1)
    assert res.diff == pytest.approx(0.25) and res.low == pytest.approx(0.25) and res.high == pytest.approx(0.25)
    assert res.verdict == "b better" and res.n == 30
    assert paired_bootstrap(a + 0.25, a, n=500).verdict == "a better"


def test_bootstrap_interval_matches_the_binomial_case():
    # 50 items, b beats a on 40 of them by 1: diff = 0.8, sd of the mean = sqrt(.8 * .2 / 50) = 0.0566
    a = np.zeros(50)
    b = np.r_[np.ones(40), np.zeros(10)]
    res = paired_bootstrap(a, b, n=4000, seed=0)
    assert res.diff == pytest.approx(0.8)
    half = 1.96 * math.sqrt(0.8 * 0.2 / 50)
    assert res.low == pytest.approx(0.8 - half, abs=0.03) and res.high == pytest.approx(0.8 + half, abs=0.03)
    assert res.verdict == "b better"


def test_bootstrap_no_verdict_when_the_interval_straddles_zero():
    a = np.zeros(20)
    b = np.r_[np.ones(10), -np.ones(10)]  # mean difference 0
    res = paired_bootstrap(a, b, n=2000, seed=3)
    assert res.low < 0 < res.high and res.verdict == "no clear difference"


def test_bootstrap_drops_missing_pairs_and_checks_shapes():
    res = paired_bootstrap([0.0, np.nan, 1.0], [1.0, 5.0, np.nan], n=200)
    assert res.n == 1 and res.diff == 1.0
    with pytest.raises(ValueError, match="same length"):
        paired_bootstrap([1.0, 2.0], [1.0], n=200)
