"""Template-free fact reading (``t2g_core.demo.facts``), the task metric and the reference critic built on it.

Three kinds of checks:
- template summaries read exactly as before: on 400 generated demo items every scorer output, span and reference
  critique equals what the template-only code produced (a digest measured before free-text reading existed), and the
  verdicts equal the generator's own flaw records;
- hand-made free-text cases for each rule (numbers, colours, cues, paraphrases, words of several facts);
- SmolLM2-135M-Instruct's real summaries of 24 demo posts (``tests/fixtures/real_outputs/``), 12 of them labelled by
  hand below.
"""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from t2g_core.annotators import feedback_rows
from t2g_core.critics.reference import ReferenceCritic
from t2g_core.demo import make_demo_feedback
from t2g_core.demo import summarization as S
from t2g_core.demo.facts import read_facts
from t2g_core.evaluation.metrics import fact_metrics

CRITIC = ReferenceCritic()
FACTS = {
    "name": "Cai",
    "city": "Quito",
    "count": "3",
    "pet": "dogs",
    "color": "gray",
    "job": "coach",
    "day": "Sunday",
    "food": "beans",
}
# sha256 of every scorer output, span list and reference critique on the 400 items of seeds 101 and 102 (and their
# reference summaries), measured with the template-only scorer and critic; see _template_outputs
TEMPLATE_DIGEST = "2e7e5516b42c529d7d13941a3d55f78bbd428e905a48d6367a92d73459c7c4c0"


def _status(text: str, facts: dict[str, str] = FACTS) -> dict[str, str]:
    reading = read_facts(text, facts)
    return {slot: reading.status(slot) for slot in facts}


# --------------------------------------------------------------------------------------------- template: unchanged
def _template_outputs() -> str:
    out = {}
    for seed in (101, 102):
        for r in feedback_rows(make_demo_feedback("summarization", 200, seed=seed)):
            facts, resp = r["meta"]["facts"], r["response"]
            fb = CRITIC.critique(r)
            out[r["id"]] = {
                "score": S.summary_errors(resp, facts).as_dict(),
                "spans": S.summary_spans(resp, facts),
                "typed": S.typed_spans(resp, facts),
                "critique": [
                    fb.critique,
                    fb.good_spans,
                    fb.poor_spans,
                    list(fb.missing),
                    list(fb.missing_at),
                    [list(w) for w in fb.word_scores],
                ],
            }
            ref = dict(r, response=r["reference"])
            fb = CRITIC.critique(ref)
            out[r["id"] + "-ref"] = {
                "score": S.summary_errors(r["reference"], facts).as_dict(),
                "critique": [fb.critique, fb.good_spans, fb.poor_spans, list(fb.missing)],
            }
    return json.dumps(out, sort_keys=True)


def test_template_summaries_score_and_critique_exactly_as_before():
    digest = hashlib.sha256(_template_outputs().encode()).hexdigest()
    assert digest == TEMPLATE_DIGEST, "the scorer or the reference critic changed on template summaries"


def test_template_verdicts_equal_the_generators_flaw_records():
    rng = random.Random(7)
    for _ in range(300):
        item = S.make_item(rng)
        score = S.summary_errors(item.response, item.facts)
        expected = dict.fromkeys(item.facts, "correct")
        for flaw in item.flaws:
            if flaw["type"] in ("invented", "swapped"):
                expected[flaw["slot"]] = "wrong"
            elif flaw["type"] == "omitted":
                expected[flaw["slot"]] = "missing"
        assert score.slots == expected, (item.response, item.flaws)
        assert score.n_redundant == sum(f["type"] == "redundant" for f in item.flaws)
        assert score.n_invented == sum(f["type"] == "invented" for f in item.flaws)
        assert score.n_swapped == sum(f["type"] == "swapped" for f in item.flaws)
        assert read_facts(item.response, item.facts).template_only


# --------------------------------------------------------------------------------------------- hand-made free text
def test_a_correct_free_text_summary_is_correct_everywhere():
    text = "Cai, a coach from Quito, has three gray puppies; on Sundays he rests and he loves beans."
    assert set(_status(text).values()) == {"present"}
    score = S.summary_errors(text, FACTS)
    assert score.error == 0.0 and score.precision == 1.0 and score.n_invented == 0
    fb = CRITIC.critique(
        {"task": "summarization", "prompt": "", "response": text, "reference": "x", "meta": {"facts": FACTS}}
    )
    assert fb.poor_spans == [] and fb.missing == () and "accurate and complete" in fb.critique


def test_foreign_values_are_attributed_to_their_fact_and_absent_ones_are_missing():
    text = "Ben lives in Lima with two cats. He works as a chef."
    assert _status(text) == {
        "name": "foreign",
        "city": "foreign",
        "count": "foreign",
        "pet": "foreign",
        "color": "absent",
        "job": "foreign",
        "day": "absent",
        "food": "absent",
    }
    score = S.summary_errors(text, FACTS)
    assert (score.n_wrong, score.n_missing, score.n_invented, score.n_swapped) == (5, 3, 5, 0)
    assert score.claims["count"] == "2" and score.claims["pet"] == "cats"


def test_numbers_and_colours_count_only_next_to_the_pets():
    assert _status("Cai is 3 years old and eats black beans.")["count"] == "absent"
    assert _status("Cai is 3 years old and eats black beans.")["color"] == "absent"
    assert _status("His fur-coated friends: 3 brown dogs.")["color"] == "foreign"
    assert _status("Their fur is grey.")["color"] == "present"
    assert _status("He has 5 pets.")["count"] == "foreign"


def test_a_cue_claims_the_next_value_whatever_its_type():
    swapped = S.summary_errors("Cai lives in Sunday and rests on Quito.", FACTS)
    assert swapped.slots["city"] == swapped.slots["day"] == "wrong" and swapped.n_swapped == 2
    assert _status("He lives in Springfield.")["city"] == "foreign"  # an invented city after a city cue
    assert _status("He lives in a small town.")["city"] == "absent"  # no value after the cue: no claim
    assert _status("He works as a professional coach.")["job"] == "present"


def test_proper_nouns_count_only_capitalised_and_repeated_clauses_are_repeats():
    assert _status("the cai tree in quito")["name"] == "absent"
    reading = read_facts("Cai lives in Quito. Also, lives in Quito.", FACTS)
    assert reading.status("city") == "present" and [r[0] for r in reading.repeats] == ["city"]


def test_a_word_that_is_a_value_of_several_facts_goes_to_the_post_fact():
    facts = {"name": "Lima", "city": "Quito"}  # a post whose person is named after a city
    assert _status("Lima lives in Quito.", facts) == {"name": "present", "city": "present"}
    assert _status("Lima is in Peru.", {"name": "Ada", "city": "Quito"})["city"] == "foreign"


# --------------------------------------------------------------------------------------------- critic on free text
def test_a_verbatim_copy_of_the_post_is_accurate_and_complete():
    for r in feedback_rows(make_demo_feedback("summarization", 20, seed=9)):
        fb = CRITIC.critique(dict(r, response=r["prompt"]))
        assert fb.poor_spans == [] and fb.missing == (), (r["prompt"], fb.critique)
        assert len(fb.good_spans) == 8 and "accurate and complete" in fb.critique


def test_the_critic_quotes_foreign_values_and_reports_missing_ones_in_free_text():
    row = {
        "task": "summarization",
        "prompt": "I am named Cai. I live in Quito.",
        "response": "Cai is a chef who lives in Lima. Cai loves beans and the Martians.",
        "reference": S.reference_summary(FACTS),
        "meta": {"facts": FACTS},
    }
    fb = CRITIC.critique(row)
    assert fb.poor_spans == ["chef", "Lima", "Martians"] and fb.good_spans == ["Cai is", ". Cai", "beans"]
    assert "It says 'Lima' where the post says 'Quito' (city)." in fb.critique
    assert "It says 'chef' where the post says 'coach' (job)." in fb.critique
    assert "It mentions 'Martians', which the post does not." in fb.critique
    assert fb.missing == ("the count (3)", "the pet (dogs)", "the color (gray)", "the day (Sunday)")
    assert fb.missing_at == (len(row["response"]),) * 4
    scores = dict(fb.word_scores)
    assert scores["Lima"] == -1.0 and scores["beans"] == 1.0 and scores["loves"] == 0.0


def test_free_text_fact_metrics():
    out = fact_metrics("Cai lives in Lima and loves beans.", FACTS)
    # stated: name, city (Lima: invented), food; correct 2 of 8
    assert out == pytest.approx(
        {"fact_precision": 2 / 3, "fact_recall": 2 / 8, "invented_entity_rate": 1 / 3, "fact_error": 6 / 8}
    )
