"""Reference critic: checked against the demo's gold spans, on hand-made cases, and on arbitrary text."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from t2g_core.annotators import feedback_rows
from t2g_core.critics.reference import ReferenceCritic
from t2g_core.demo import make_demo_feedback

CRITIC = ReferenceCritic()


def _overlaps(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def span_scores(rows) -> dict[str, tuple[float, float]]:
    """label -> (precision, recall) of predicted quotes vs meta.gold_spans, by character overlap."""
    hits = {lab: [0, 0, 0, 0] for lab in ("positive", "negative")}  # pred ok, n pred, gold found, n gold
    for r in rows:
        fb, resp = CRITIC.critique(r), r["response"]
        for lab, quotes in (("positive", fb.good_spans), ("negative", fb.poor_spans)):
            assert all(resp.count(q) == 1 for q in quotes), quotes  # exact, unambiguous quotes
            preds = [(resp.find(q), resp.find(q) + len(q)) for q in quotes]
            golds = [(g["start"], g["end"]) for g in r["meta"]["gold_spans"] if g["label"] == lab]
            h = hits[lab]
            h[0] += sum(any(_overlaps(p, g) for g in golds) for p in preds)
            h[1] += len(preds)
            h[2] += sum(any(_overlaps(p, g) for p in preds) for g in golds)
            h[3] += len(golds)
    return {lab: (h[0] / max(h[1], 1), h[2] / max(h[3], 1)) for lab, h in hits.items()}


def test_summarization_demo_matches_gold_spans():
    rows = feedback_rows(make_demo_feedback("summarization", 150, seed=11))
    scores = span_scores(rows)
    assert scores["negative"][0] >= 0.95 and scores["negative"][1] >= 0.90, scores
    assert scores["positive"][0] >= 0.95 and scores["positive"][1] >= 0.95, scores
    flawless = [r for r in rows if not r["meta"]["flaws"]]
    assert flawless and all(CRITIC.critique(r).poor_spans == [] for r in flawless)


def test_qa_demo_matches_gold_spans():
    scores = span_scores(feedback_rows(make_demo_feedback("qa", 120, seed=5)))
    assert scores["negative"] >= (0.95, 0.95) and scores["positive"] >= (0.95, 0.95), scores


def test_critique_says_what_the_source_says_and_what_is_missing():
    row = {
        "task": "summarization",
        "prompt": "I am Gus. I live in Dakar. I have 2 pets. I love bread.",
        "response": "This is Gus, who lives in Oslo with 2 pets. Also, lives in Oslo.",
        "reference": "This is Gus, who lives in Dakar with 2 pets and loves bread.",
        "meta": {"facts": {"name": "Gus", "city": "Dakar", "count": "2", "food": "bread"}},
    }
    fb = CRITIC.critique(row)
    assert "It says 'Oslo' where the post says 'Dakar' (city)." in fb.critique
    assert "It leaves out the food (bread)." in fb.critique and "repeats itself" in fb.critique
    assert "the name (Gus)" in fb.critique
    assert fb.good_spans == ["Gus", "2"] and fb.poor_spans == ["who lives in Oslo", "Also, lives in Oslo"]


@pytest.mark.parametrize("meta", [None, float("nan"), ""])  # NaN: an all-null column read back from Parquet
def test_without_meta_it_checks_numbers_and_entities_against_the_source(meta):
    row = {
        "task": "summarization",
        "prompt": "Maria met Tom in Rome in 2019 and they married two years later.",
        "response": "Maria met Tom in Paris in 2019 and they married in 2023 in Vienna.",
        "reference": "Maria met Tom in Rome in 2019; they married two years later.",
        "meta": meta,
    }
    fb = CRITIC.critique(row)
    assert "It says 'Paris' where the post says 'Rome'." in fb.critique
    assert "2023" in " ".join(fb.poor_spans) and "Vienna" in " ".join(fb.poor_spans)
    assert "2019" in fb.good_spans and "Tom" in fb.good_spans


def test_no_reference_is_a_status_not_an_exception():
    fb = CRITIC.critique({"id": "x", "task": "qa", "prompt": "q", "response": "a", "reference": None})
    assert fb.status == "missing_input" and "no reference" in fb.error


def test_fast_enough_for_every_ppo_rollout():
    rows = feedback_rows(make_demo_feedback("summarization", 200, seed=2))
    start = time.perf_counter()
    for r in rows:
        CRITIC.critique({k: r[k] for k in ("task", "prompt", "response", "reference", "meta")})
    per_item = (time.perf_counter() - start) / len(rows)
    assert per_item < 0.005, f"{per_item * 1000:.2f} ms per item"


REF = make_demo_feedback("summarization", 1, seed=3).iloc[0].to_dict()
META = feedback_rows(make_demo_feedback("summarization", 1, seed=3))[0]["meta"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(list("abc XYZ 12 .,!\n") + ["Dakar", "Gus", " rests on ", "Also", "This is "]), max_size=40
    ).map("".join)
)
def test_any_policy_output_gets_a_critique_with_exact_quotes(response):
    row = {**REF, "response": response, "meta": META}
    fb = CRITIC.critique(row)
    assert fb.status == "ok" and fb.critique
    assert all(q and q in response for q in fb.good_spans + fb.poor_spans)


@pytest.mark.parametrize("task", ["summarization", "qa"])
def test_correct_responses_get_no_poor_spans(task):
    for r in feedback_rows(make_demo_feedback(task, 20, seed=9)):
        fb = CRITIC.critique(dict(r, response=r["reference"]))
        assert fb.poor_spans == [] and "leaves out" not in fb.critique, fb.critique


def test_critique_batch_is_the_reward_source_protocol():
    rows = feedback_rows(make_demo_feedback("qa", 4, seed=1))
    assert [fb.poor_spans for fb in CRITIC.critique_batch(rows)] == [CRITIC.critique(r).poor_spans for r in rows]


def test_a_long_repetitive_response_gets_capped_unique_quotes():
    """A policy can write the same wrong clause a thousand times: the critique stays bounded (MAX_SPANS quotes, each
    occurring once in the response) and its cost linear (before: cubic, 35 s for 30 KB; see bench_annotate.py)."""
    import json

    from t2g_core.critics.reference import MAX_NOTES, MAX_SPANS, ReferenceCritic
    from t2g_core.demo import make_demo_feedback

    row = make_demo_feedback("summarization", 1, seed=3).iloc[0].to_dict()
    row["meta"] = json.loads(row["meta"])
    long = dict(row, response=" ".join([row["response"], "Bo lives in Atlantis."] * 400))
    fb = ReferenceCritic().critique(long)
    assert 0 < len(fb.poor_spans) <= MAX_SPANS and len(fb.good_spans) <= MAX_SPANS
    assert all(long["response"].count(q) == 1 for q in fb.poor_spans + fb.good_spans)
    assert fb.critique.count("It ") <= MAX_NOTES + 2
