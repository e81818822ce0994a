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
from tests.core._facts import CAI

CRITIC = ReferenceCritic()
FACTS = CAI
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


def test_a_cue_claims_the_noun_after_an_adjective_and_a_second_cue_with_another_value_contradicts():
    reading = read_facts("Cai enjoys eating white bread.", FACTS)
    assert [m.value for m in reading.stated("food")] == ["bread"] and reading.status("color") == "absent"
    assert _status("A dog named Cai and a cat named Ela.")["name"] == "foreign"
    assert _status("Cai, named Cai by his mother.")["name"] == "present"  # the same value again: no contradiction
    assert _status("He has a pair of fluffy dogs.")["count"] == "foreign"  # a pair is 2, the post says 3


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


def test_a_template_opening_with_reordered_clauses_is_read_fact_by_fact():
    """A warmed-up SmolLM2 wrote this during PPO (a critique-loop round on the real model): it opens like the
    template, so the clause-by-clause comparison read it and reported the city, the count, the pet, the colour, the
    job and the day left out, though it states the city and the colour (that round's mean annotator
    reward was -10.0, -8.0 once read fact by fact). Read fact by fact, only what is really absent is missing."""
    facts = {"name": "Ivo", "city": "Perth", "count": "6", "pet": "goats", "color": "white"}
    facts |= {"job": "nurse", "day": "Wednesday", "food": "rice"}
    row = {
        "task": "summarization",
        "prompt": "I enjoy eating rice. I am named Ivo. They are colored white. I rest on Wednesday. I work as a "
        "nurse. They are all goats. I live with 6 pets. I live in Perth.",
        "response": "A person named Ivo, who is named Ivo, enjoys eating rice. They are all white, with a goat's "
        "coloring, are colored white, live in Perth, and are all goats.",
        "reference": S.reference_summary(facts),
        "meta": {"facts": facts},
    }
    fb = CRITIC.critique(row)
    assert "the city (Perth)" not in fb.missing and "the color (white)" not in fb.missing, fb.critique
    assert {"the count (6)", "the job (nurse)", "the day (Wednesday)"} <= set(fb.missing)
    assert "Perth" in fb.good_spans and "rice" in fb.good_spans
    assert "It repeats itself" in fb.critique  # the second "named Ivo"


def test_free_text_fact_metrics():
    out = fact_metrics("Cai lives in Lima and loves beans.", FACTS)
    # stated: name, city (Lima: invented), food; correct 2 of 8
    assert out == pytest.approx(
        {"fact_precision": 2 / 3, "fact_recall": 2 / 8, "invented_entity_rate": 1 / 3, "fact_error": 6 / 8}
    )


# --------------------------------------------------------------------------------------------- SmolLM2's real outputs
# Hand labels: 20 of the 48 rows of tests/fixtures/real_outputs/smollm2_summaries.jsonl, read by a person against the
# post's facts. Per fact: present = the summary states the post's value (in any wording: "two dogs", "a goat" for
# goats); foreign = it states another value of the fact's type, whatever else it says ("a parrot" beside "a goat",
# "a cow named Ela" beside "named Kim", "chef and a baker" when the post says chef); absent = it says nothing about it.
# Words about something else are no mention: "white bread" says nothing about the pets' colour, "Norwegian" and
# "Norway" are no city, "18-year-old" no pet count, "birds" in "enjoys eating birds" is a (wrong) food.
ABSENT, PRESENT, FOREIGN = "absent", "present", "foreign"


def _label(**said: str) -> dict[str, str]:
    return {slot: said.get(slot, ABSENT) for slot in S.SLOTS}


HAND_LABELS = {
    ("sum-s24-00000", "greedy"): _label(name=PRESENT, pet=PRESENT, job=PRESENT, food=PRESENT),
    ("sum-s24-00000", "sampled"): _label(name=FOREIGN, pet=FOREIGN, day=PRESENT, food=PRESENT),  # Luna, a parrot
    ("sum-s24-00001", "sampled"): _label(city=PRESENT),
    ("sum-s24-00002", "greedy"): _label(name=PRESENT, count=PRESENT, job=PRESENT, food=PRESENT),
    ("sum-s24-00003", "greedy"): _label(name=PRESENT, count=PRESENT, pet=PRESENT, day=PRESENT),
    ("sum-s24-00004", "sampled"): _label(name=PRESENT, count=PRESENT, pet=PRESENT, job=FOREIGN),
    ("sum-s24-00005", "greedy"): _label(name=PRESENT, job=PRESENT, food=PRESENT),
    ("sum-s24-00006", "sampled"): _label(name=PRESENT, pet=PRESENT, color=FOREIGN, job=PRESENT),
    ("sum-s24-00007", "sampled"): _label(name=FOREIGN, count=PRESENT, pet=FOREIGN, color=FOREIGN),  # marmalade cat
    ("sum-s24-00009", "greedy"): _label(name=PRESENT, city=PRESENT, pet=PRESENT, food=PRESENT),
    ("sum-s24-00010", "greedy"): _label(name=PRESENT, city=PRESENT, job=PRESENT),
    ("sum-s24-00011", "greedy"): _label(name=PRESENT, pet=FOREIGN, color=PRESENT),
    ("sum-s24-00013", "sampled"): _label(name=PRESENT, job=PRESENT),
    ("sum-s24-00014", "greedy"): _label(city=PRESENT, count=PRESENT, pet=PRESENT, color=PRESENT, food=PRESENT),
    ("sum-s24-00017", "greedy"): _label(name=PRESENT, city=PRESENT, job=FOREIGN, food=FOREIGN),
    ("sum-s24-00018", "sampled"): _label(name=FOREIGN, count=PRESENT, pet=FOREIGN, job=PRESENT),
    ("sum-s24-00019", "sampled"): _label(name=PRESENT, city=PRESENT, food=PRESENT),
    ("sum-s24-00020", "greedy"): _label(name=PRESENT, food=FOREIGN),
    ("sum-s24-00021", "sampled"): _label(name=PRESENT),
    ("sum-s24-00023", "sampled"): _label(city=PRESENT, count=FOREIGN, pet=PRESENT, color=PRESENT),  # a pair of rabbits
}
# where the reading disagrees with the hand label, and why: values outside the demo's vocabularies
KNOWN_MISSES = {
    ("sum-s24-00000", "sampled", "pet"): PRESENT,  # "a parrot" is no demo pet; "goat" is the post's
    ("sum-s24-00007", "sampled", "color"): ABSENT,  # "marmalade" is no demo colour
}


def _real_rows() -> dict[tuple[str, str], dict]:
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "fixtures" / "real_outputs" / "smollm2_summaries.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {(r["id"], r["decoding"]): r for r in rows}


def _critique(row: dict):
    item = {"response": row["response"], "reference": S.reference_summary(row["facts"]), "meta": row}
    return CRITIC.critique({"task": "summarization", "prompt": row["prompt"], **item})


def test_the_fixture_is_smollm2_on_demo_posts():
    rows = _real_rows()
    assert len(rows) == 48 and {d for _, d in rows} == {"greedy", "sampled"}
    for (item_id, _), row in rows.items():
        assert set(row["facts"]) == set(S.SLOTS) and all(f" {v}" in row["prompt"] for v in row["facts"].values())
        assert item_id.startswith("sum-s24-") and row["response"]


def test_reading_and_metric_agree_with_the_hand_labels():
    rows, verdict = _real_rows(), {"correct": PRESENT, "wrong": FOREIGN, "missing": ABSENT}
    for key, labels in HAND_LABELS.items():
        row = rows[key]
        reading, score = read_facts(row["response"], row["facts"]), S.summary_errors(row["response"], row["facts"])
        expected = {s: KNOWN_MISSES.get((*key, s), label) for s, label in labels.items()}
        assert {s: reading.status(s) for s in S.SLOTS} == expected, (key, row["response"])
        assert {s: verdict[v] for s, v in score.slots.items()} == expected
    agree = sum(1 for key, labels in HAND_LABELS.items() for s in labels if (*key, s) not in KNOWN_MISSES)
    assert agree / (8 * len(HAND_LABELS)) == 158 / 160


def test_the_critic_on_real_outputs_quotes_foreign_values_and_reports_what_is_absent():
    rows = _real_rows()
    for key, labels in HAND_LABELS.items():
        row, fb = rows[key], _critique(rows[key])
        reading = read_facts(row["response"], row["facts"])
        assert fb.status == "ok" and all(row["response"].count(q) == 1 for q in fb.good_spans + fb.poor_spans)
        expected = {s: KNOWN_MISSES.get((*key, s), label) for s, label in labels.items()}
        missing = {m.removeprefix("the ").split(" (")[0] for m in fb.missing}
        assert missing == {s for s, label in expected.items() if label == ABSENT}, (key, fb.missing)
        for slot, label in expected.items():
            quoted = [row["response"][m.start : m.end] for m in reading.stated(slot)]
            if label == FOREIGN:  # every foreign value is inside a poor span, named in the critique
                wrong = [q for q, m in zip(quoted, reading.stated(slot), strict=True) if not reading.correct(m)]
                assert wrong and all(any(q in p for p in fb.poor_spans) for q in wrong), (key, slot, fb.poor_spans)
                assert f"where the post says '{row['facts'][slot]}' ({slot})" in fb.critique
            if label == PRESENT:  # the post's value is quoted as good and never as poor
                assert any(q in g for q in quoted for g in fb.good_spans), (key, slot, fb.good_spans)
                assert not any(row["facts"][slot] in p for p in fb.poor_spans), (key, slot, fb.poor_spans)


def test_a_copied_post_from_smollm2_is_accurate_as_far_as_it_goes():
    row = _real_rows()[("sum-s24-00021", "greedy")]  # seven of the post's sentences, shuffled, the day left out
    fb = _critique(row)
    assert fb.poor_spans == [] and fb.missing == ("the day (Wednesday)",)
    assert S.summary_errors(row["response"], row["facts"]).error == pytest.approx(1 / 8)
