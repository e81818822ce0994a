"""Demo data: ground truth consistent with the text, schema-valid, deterministic per seed; the task scorer."""

from __future__ import annotations

import ast
import json
import random

import pandas as pd
import pytest

from t2g_core.demo import demo_corpus, gold_feedback, make_demo_feedback
from t2g_core.demo import summarization as S
from t2g_core.demo.code import load_problems, mutants, passes_tests
from t2g_core.schemas import FEEDBACK, validate_frame
from tests.core._facts import CAI


@pytest.fixture(scope="module")
def code_df():
    return make_demo_feedback("code", 16, seed=3)


def _spans(row):
    return json.loads(row["meta"])["gold_spans"]


@pytest.mark.parametrize("task", ["summarization", "qa"])
def test_frames_are_schema_valid_and_deterministic(task):
    a, b = make_demo_feedback(task, 60, seed=5), make_demo_feedback(task, 60, seed=5)
    validate_frame(a, FEEDBACK, "x")
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(make_demo_feedback(task, 60, seed=6))
    assert a["id"].is_unique and (a["task"] == task).all()
    prefix = {"summarization": "sum-s5-", "qa": "qa-s5-"}[task]
    assert a["id"].iloc[42] == f"{prefix}00042"  # ids name the seed: another seed's file adds new items


def test_code_frame_is_schema_valid_and_deterministic(code_df):
    validate_frame(code_df, FEEDBACK, "x")
    unverified = make_demo_feedback("code", 40, seed=3, verify_code=False)
    pd.testing.assert_frame_equal(unverified, make_demo_feedback("code", 40, seed=3, verify_code=False))
    assert code_df["tests"].str.contains("def check").all() and code_df["entry_point"].notna().all()


def test_summarization_gold_spans_match_the_text_and_the_facts():
    df = make_demo_feedback("summarization", 300, seed=0)
    kinds = set()
    for row in df.to_dict(orient="records"):
        meta = json.loads(row["meta"])
        facts, spans, response = meta["facts"], meta["gold_spans"], row["response"]
        kinds |= {f["type"] for f in meta["flaws"]}
        for span in spans:
            text = response[span["start"] : span["end"]]
            if text.startswith("Also, "):  # a repeated clause
                assert span["label"] == "negative" and f" {facts[span['slot']]}" in text
            else:
                assert (text == facts[span["slot"]]) == (span["label"] == "positive"), (row["id"], span, text)
        if not meta["flaws"]:
            assert response == row["reference"] and all(s["label"] == "positive" for s in spans)
            assert len(spans) == len(S.SLOTS)
        # the parser recovers exactly the spans recorded while building the text
        assert S.summary_spans(response, facts) == sorted(spans, key=lambda d: (d["start"], d["end"]))
    assert kinds == set(S.FLAW_TYPES)
    assert 0.1 < (df["response"] == df["reference"]).mean() < 0.5


def test_post_states_every_fact_once_and_reference_is_the_template():
    rng = random.Random(1)
    facts = S.sample_facts(rng)
    post = S.render_post(facts, rng)
    for slot, value in facts.items():
        assert S.POST_SENTENCES[slot].format(value) in post
    ref = S.reference_summary(facts)
    assert ref.startswith(
        f"A person named {facts['name']} lives in {facts['city']} with {facts['count']} pets, all {facts['pet']}"
    )
    assert S.summary_errors(ref, facts).error == 0.0


def test_summary_errors_counts_wrong_missing_redundant_invented_and_swapped():
    facts = dict(CAI)
    text = (
        "A person named Cai lives in Lima with 3 pets, all dogs, works as a beans, rests on Sunday and enjoys eating "
        "coach."
        " Also, rests on Sunday."
    )
    score = S.summary_errors(text, facts)
    assert score.slots == {
        "name": "correct",
        "city": "wrong",
        "count": "correct",
        "pet": "correct",
        "color": "missing",
        "job": "wrong",
        "day": "correct",
        "food": "wrong",
    }
    assert (score.n_correct, score.n_wrong, score.n_missing, score.n_redundant) == (4, 3, 1, 1)
    assert (score.n_invented, score.n_swapped) == (1, 2)  # Lima is invented; beans/coach are the post's values
    assert score.error == pytest.approx(0.5) and score.recall == pytest.approx(0.5)
    assert score.precision == pytest.approx(4 / 8) and score.invented_rate == pytest.approx(1 / 7)
    assert S.summary_errors("gibberish", facts).n_missing == 8
    assert S.summary_errors("gibberish", facts).precision == 0.0


def test_warm_start_pairs_hallucinate_at_the_requested_rate():
    pairs = S.warm_start_pairs(400, seed=0, p_halluc=0.35)
    assert pairs == S.warm_start_pairs(400, seed=0, p_halluc=0.35)
    # recover the facts from the post to score each noisy summary
    errors = []
    for post, summary in pairs:
        facts = {slot: next(v for v in S.VOCAB[slot] if S.POST_SENTENCES[slot].format(v) in post) for slot in S.SLOTS}
        score = S.summary_errors(summary, facts)
        assert score.n_missing == 0 and score.n_swapped == 0
        errors.append(score.error)
    assert 0.30 < sum(errors) / len(errors) < 0.40


def test_qa_gold_spans():
    df = make_demo_feedback("qa", 64, seed=2)
    for row in df.to_dict(orient="records"):
        meta = json.loads(row["meta"])
        (span,) = _spans(row)
        text = row["response"][span["start"] : span["end"]]
        assert (text == meta["answer"]) == (span["label"] == "positive")
        assert (row["response"] == row["reference"]) == (not meta["flaws"])


def test_code_mutants_differ_from_canonical_exactly_at_mutation_line(code_df):
    n_mutants = 0
    for row in code_df.to_dict(orient="records"):
        meta = json.loads(row["meta"])
        line = meta["mutation_line"]
        if line is None:
            assert row["response"] == row["reference"] and meta["gold_spans"] == []
            continue
        n_mutants += 1
        got, ref = row["response"].split("\n"), row["reference"].split("\n")
        assert len(got) == len(ref)
        assert [i + 1 for i, (a, b) in enumerate(zip(got, ref, strict=True)) if a != b] == [line]
        (span,) = meta["gold_spans"]
        assert span["label"] == "negative"
        assert row["response"][span["start"] : span["end"]] == got[line - 1].strip()
        ast.parse(row["prompt"] + row["response"])  # still valid Python
    assert n_mutants >= 6


def test_kept_code_mutants_fail_their_tests_and_canonical_passes(code_df):
    problems = {p["task_id"]: p for p in load_problems()}
    rows = code_df.to_dict(orient="records")
    mutated = [r for r in rows if json.loads(r["meta"])["mutation_line"] is not None][:3]
    for row in mutated:
        problem = problems[json.loads(row["meta"])["task_id"]]
        assert not passes_tests(problem, row["response"])
        assert passes_tests(problem, row["reference"])


def test_mutants_cover_each_kind():
    problem = next(p for p in load_problems() if p["task_id"] == "HumanEval/0")
    kinds = {m.kind for m in mutants(problem["prompt"], problem["canonical_solution"])}
    assert {"flip_comparison", "change_return"} <= kinds


def test_gold_feedback_and_corpus_hold_critiques_and_span_json():
    df = make_demo_feedback("summarization", 20, seed=0)
    row = next(r for r in df.to_dict(orient="records") if json.loads(r["meta"])["flaws"])
    fb = gold_feedback(row)
    assert fb["poor_spans"] and all(s in row["response"] for s in fb["good_spans"] + fb["poor_spans"])
    corpus = demo_corpus(df)
    assert json.dumps(fb) in corpus and fb["critique"] in corpus
    assert any("but the post says" in t for t in corpus)


def test_unknown_task_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown demo task 'poems'"):
        make_demo_feedback("poems", 3)
