"""Review sampling is stratified and reproducible; Wilson intervals match published values; alignment and gate."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from t2g_core.config import ValidateConfig
from t2g_core.review import ItemVerdict, ReviewVerdicts, SpanJudgement, VerdictError
from t2g_core.validation import (
    compute_alignment,
    gold_by_id,
    ground_truth_review,
    make_batch,
    review_sample,
    wilson_interval,
)
from t2g_core.validation.sampling import allocate, eligible_items
from t2g_core.validation.synthetic import make_synthetic_batch

CFG = ValidateConfig()


def _batch(**kw):
    s = make_synthetic_batch(**kw)
    return s, make_batch(s.annotations, s.spans, s.feedback)


def _wilson_formula(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The textbook closed form, as a twin of the shipped scipy-based function."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_interval_matches_newcombe_1998(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert (round(lo, 4), round(hi, 4)) == (low, high)
    assert (lo, hi) == pytest.approx(_wilson_formula(k, n), abs=1e-9)


def test_wilson_interval_of_nothing_is_uninformative():
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_sample_is_stratified_by_task_annotator_and_label():
    _, b = _batch(n_items=60, annotators=("a1", "a2", "a3"))
    strata = eligible_items(b)["stratum"]
    sample = review_sample(b, CFG.model_copy(update={"sample_size": 12}))
    assert len(sample.items) == 12
    assert {it.stratum for it in sample.items} == set(strata)  # every stratum represented
    assert all(it.stratum.split("/")[1] == it.annotator for it in sample.items)
    counts = pd.Series([it.stratum for it in sample.items]).value_counts()
    share = strata.value_counts() / len(strata) * 12
    assert ((counts - share[counts.index]).abs() <= 1.0 + 1e-9).all()


def test_sample_is_reproducible_with_a_seed_and_independent_of_row_order():
    s, b = _batch(n_items=60)
    cfg = CFG.model_copy(update={"sample_size": 10, "sample_seed": 7})
    first = review_sample(b, cfg)
    shuffled = make_batch(
        s.annotations.sample(frac=1, random_state=3), s.spans.sample(frac=1, random_state=4), s.feedback
    )
    again = review_sample(shuffled, cfg)
    assert [it.id for it in first.items] == [it.id for it in again.items] and first.key == again.key
    other = review_sample(b, cfg.model_copy(update={"sample_seed": 8}))
    assert {it.id for it in other.items} != {it.id for it in first.items}


def test_allocation_is_proportional_with_one_per_stratum():
    rng = np.random.default_rng(0)
    assert allocate({"a": 90, "b": 10}, 20, rng) == {"a": 18, "b": 2}
    assert allocate({"a": 99, "b": 1}, 10, rng) == {"a": 9, "b": 1}
    assert allocate({"a": 3, "b": 2}, 50, rng) == {"a": 3, "b": 2}
    small = allocate({"a": 5, "b": 5, "c": 5}, 2, rng)
    assert sum(small.values()) == 2 and max(small.values()) == 1


def test_sample_carries_spans_prompt_and_critique():
    s, b = _batch(n_items=10)
    sample = review_sample(b, CFG.model_copy(update={"sample_size": 4}))
    for it in sample.items:
        row = s.feedback.set_index("id").loc[it.id]
        assert it.response == row["response"] and it.prompt == row["prompt"] and it.critique
        assert all(it.response[sp.start : sp.end] == sp.text for sp in it.spans if sp.start is not None)


def _verdicts(sample, agree_pattern):
    items = []
    for it, pattern in zip(sample.items, agree_pattern, strict=False):
        spans = [SpanJudgement(span_index=s.span_index, agree=a) for s, a in zip(it.spans, pattern, strict=False)]
        items.append(ItemVerdict(id=it.id, spans=spans))
    return ReviewVerdicts(reviewer="t", sample_key=sample.key, items=items)


def test_alignment_is_agreed_over_judged_and_gates_on_the_lower_bound():
    _, b = _batch(n_items=20)
    sample = review_sample(b, CFG.model_copy(update={"sample_size": 10}))
    v = _verdicts(sample, [[True, True, True, True, False]] * 10)  # 40 of 50 agreed
    res = compute_alignment(sample, v, CFG)
    assert (res.overall.agreed, res.overall.judged) == (40, 50) and res.overall.point == pytest.approx(0.8)
    assert res.failed_groups == ["summarization"]  # lower bound ~0.67 < 0.8
    point = compute_alignment(sample, v, CFG.model_copy(update={"alignment_gate_on": "point"}))
    assert point.passed
    assert compute_alignment(sample, v, CFG.model_copy(update={"min_alignment": 0.6})).passed


def test_verdicts_for_items_outside_the_sample_are_rejected():
    _, b = _batch(n_items=20)
    sample = review_sample(b, CFG.model_copy(update={"sample_size": 3}))
    foreign = ReviewVerdicts(reviewer="t", sample_key=sample.key, items=[ItemVerdict(id="nope-1", spans=[])])
    with pytest.raises(VerdictError, match="nope-1"):
        compute_alignment(sample, foreign, CFG)
    bad_span = ReviewVerdicts(
        reviewer="t", items=[ItemVerdict(id=sample.items[0].id, spans=[SpanJudgement(span_index=99, agree=True)])]
    )
    with pytest.raises(VerdictError, match="no span 99"):
        compute_alignment(sample, bad_span, CFG)


def test_ground_truth_reviewer_disagrees_exactly_with_flipped_labels():
    s, b = _batch(n_items=30, flip=0.3, seed=5)
    sample = review_sample(b, CFG.model_copy(update={"sample_size": 30}))
    verdicts = ground_truth_review(sample, gold_by_id(b))
    gold = gold_by_id(b)
    for v in verdicts.items:
        item = sample.item(v.id)
        for j in v.spans:
            span = next(sp for sp in item.spans if sp.span_index == j.span_index)
            truth = next(g.label for g in gold[v.id] if g.start == span.start)
            assert j.agree == (truth == span.label)
    res = compute_alignment(sample, verdicts, CFG)
    assert 0.5 < res.overall.point < 0.95 and not res.passed
    clean_s, clean_b = _batch(n_items=30)
    clean_sample = review_sample(clean_b, CFG)
    assert (
        compute_alignment(clean_sample, ground_truth_review(clean_sample, gold_by_id(clean_b)), CFG).overall.point
        == 1.0
    )


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.dictionaries(st.sampled_from("abcdefgh"), st.integers(1, 40), min_size=1),
    n=st.integers(1, 120),
    seed=st.integers(0, 5),
)
def test_allocation_properties(sizes, n, seed):
    alloc = allocate(sizes, n, np.random.default_rng(seed))
    assert sum(alloc.values()) == min(n, sum(sizes.values()))
    assert all(0 <= alloc[s] <= sizes[s] for s in sizes)
    if n >= len(sizes):
        assert all(alloc[s] >= 1 for s in sizes)
    else:
        assert max(alloc.values()) == 1


def test_a_batch_with_no_ok_item_gives_an_empty_sample_not_a_crash():
    """Before: ``TypeError: operation 'add' not supported for dtype 'str' with dtype 'float64'`` (an empty label
    column was float)."""
    s = make_synthetic_batch(n_items=6)
    failed = s.annotations.assign(status="api_error", good_spans=[[]] * 6, poor_spans=[[]] * 6, critique=None)
    b = make_batch(failed, s.spans.iloc[:0], s.feedback)
    assert eligible_items(b).empty
    assert review_sample(b, CFG).items == []
