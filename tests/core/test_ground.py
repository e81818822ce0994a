"""The offline grounding annotator ties a human critique to the words of the response it quotes or names, and is
measured against the demo's ground truth on human-style critiques of items it was never tuned on."""

from __future__ import annotations

import pytest

from t2g_core.annotators import annotate
from t2g_core.annotators.ground import GroundingCritic, ground
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.demo.critiques import grounding_quality, make_human_feedback

RESPONSE = (
    "A person named Cai lives in Berlin with 4 pets, all dogs colored gray, works as a coach, rests on Sunday and "
    "enjoys eating beans. Also, rests on Sunday."
)


@pytest.mark.parametrize(
    ("critique", "good", "poor"),
    [
        ("It says Berlin but the post says Paris.", [], ["Berlin"]),  # Paris is not in the response: nothing to quote
        ("wrong city (Berlin)", [], ["Berlin"]),
        ("the pet count is off: 4?", [], ["4"]),
        ('"with 4 pets" is not what the post says', [], ["with 4 pets"]),
        ("Says they are a coach, should be a nurse.", [], ["coach"]),
        ("The name Cai is right, the city is wrong (Berlin).", ["Cai"], ["Berlin"]),
        ("Cai and Berlin are correct.", ["Cai", "Berlin"], []),
        ("It repeats that they rest on Sunday.", [], ["Also, rests on Sunday"]),  # the repeat, not the first mention
        ("'Also, rests on Sunday' is redundant.", [], ["Also, rests on Sunday"]),
        ("The job is wrong.", [], []),  # names no words: honestly nothing
        ("It leaves out the food (rice).", [], []),
        ("Nothing wrong with Cai, nothing missing.", ["Cai"], []),  # a negated complaint is praise
        ("No errors about Berlin.", ["Berlin"], []),
        ("The city is not Berlin.", [], ["Berlin"]),  # "not" before no complaint word: a complaint
    ],
)
def test_a_critique_is_grounded_on_the_words_it_quotes_or_names(critique, good, poor):
    got_good, got_poor, _ = ground(RESPONSE, critique)
    assert (sorted(got_good), sorted(got_poor)) == (sorted(good), sorted(poor))


def test_a_repeated_value_is_widened_until_the_alignment_finds_the_one_meant():
    good, poor, _ = ground("It is red, not colored red.", "The first 'red' is wrong")
    assert poor == ["red,"] and "It is red, not colored red.".count(poor[0]) == 1


def test_an_item_without_a_critique_is_a_missing_input_and_names_the_item():
    fb = GroundingCritic().critique({"id": "x1", "response": RESPONSE, "critique": None})
    assert fb.status == "missing_input" and "'x1' has no critique" in fb.error
    named = GroundingCritic().critique({"id": "x2", "response": RESPONSE, "critique": "It says Paris? No: Lima."})
    assert named.ok and named.poor_spans == [] and "Lima" in named.reasoning and "Paris" in named.reasoning


def test_grounding_human_style_critiques_of_unseen_items_against_the_ground_truth():
    """Seed 2024 was never looked at while the annotator was written (it was developed on seeds 0 and 1). One critique
    style in eight names no words ("The job is wrong.") and no grounding can place it, which caps recall."""
    feedback = make_human_feedback(500, seed=2024)
    annotations = annotate(feedback, AnnotateConfig(annotator="ground"), progress=False).frame
    assert (annotations["status"] == "ok").all() and annotations["annotator"].eq("ground").all()
    q = grounding_quality(feedback, annotations)
    print({k: round(v, 3) for k, v in q.items()})  # the figures docs/own-data.md quotes
    assert q["poor_span_precision"] >= 0.95 and q["poor_char_precision"] >= 0.95
    assert q["poor_span_recall"] >= 0.8 and q["poor_char_recall"] >= 0.75
    assert min(q["recall_invented"], q["recall_swapped"], q["recall_redundant"]) >= 0.65
    assert q["good_span_precision"] >= 0.9


HOSTILE = {
    "one 40,000-character word": "a" * 40_000,
    "40,000 spaces after a colon": "wrong: " + " " * 40_000 + "x y",
    "20,000 unclosed curly quotes": "“a" * 20_000,
}


@pytest.mark.parametrize("critique", HOSTILE.values(), ids=HOSTILE.keys())
def test_reading_a_critique_is_linear_in_its_length(critique):
    """No pattern backtracks over a long word, whitespace run or unclosed quote (before: 15 s, 43 s and about a
    minute, quadratic). This process's CPU time is only a guard, with a wide margin: about 0.1 s each now."""
    import time

    start = time.process_time()
    good, poor, _ = ground(RESPONSE, critique)
    assert time.process_time() - start < 5
    assert good == [] and poor == []


def test_a_critique_over_the_cap_is_refused_for_its_item_and_the_others_go_on():
    from t2g_core.annotators import ground as module

    long = "Berlin is wrong. " + "x" * 40_000
    refused = GroundingCritic().critique({"id": "long", "response": RESPONSE, "critique": long})
    assert refused.status == "refused" and refused.good_spans == refused.poor_spans == []
    assert "item 'long': its critique has 40,017 characters" in refused.error
    assert f"(MAX_CRITIQUE_CHARS, {module.MAX_CRITIQUE_CHARS:,})" in refused.error
    at_cap = long[: module.MAX_CRITIQUE_CHARS]
    assert GroundingCritic().critique({"id": "x", "response": RESPONSE, "critique": at_cap}).poor_spans == ["Berlin"]

    feedback = make_human_feedback(3, seed=0)
    feedback.loc[1, "critique"] = long
    annotations = annotate(feedback, AnnotateConfig(annotator="ground"), progress=False).frame
    assert annotations["status"].tolist() == ["ok", "refused", "ok"] and "40,017 characters" in annotations["error"][1]
