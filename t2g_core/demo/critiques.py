"""The demo as a user's own feedback: summaries with critiques written the way people write them, no references.

:func:`make_human_feedback` draws demo summaries (``t2g_core.demo.summarization``) and writes, from each item's
ground-truth flaws, a critique in one of several human styles ("It says Berlin but the post says Paris.", "wrong city
(Berlin)", "the pet count is off: 4?", "'Also, rests on Sunday' is redundant.", "Where does Lima come from?"), some
that name no words at all ("The job is wrong."), an occasional word of praise ("The name (Cai) is right."), and
nothing for a flawless item but "Looks good.". The ``reference`` column is empty, as in feedback a user collected;
``meta`` keeps the facts and the ground truth, so an annotator's spans can be measured against it
(:func:`grounding_quality`).
"""

from __future__ import annotations

import json
import random

import pandas as pd

from t2g_core.alignment import micro_prf, span_prf
from t2g_core.demo import demo_id
from t2g_core.demo import summarization as S
from t2g_core.schemas import FEEDBACK, validate_frame

SLOT_WORDS = {
    "name": ("name",),
    "city": ("city", "town"),
    "count": ("pet count", "number of pets"),
    "pet": ("kind of pet", "animal"),
    "color": ("colour", "fur colour"),
    "job": ("job", "work"),
    "day": ("rest day", "day off"),
    "food": ("food", "favourite food"),
}
WRONG_VALUE = (
    "It says {stated} but the post says {expected}.",
    "wrong {slot} ({stated})",
    "the {slot} is off: {stated}?",
    "'{stated}' is wrong, it should be {expected}.",
    "{stated}? The post says {expected}.",
    "Says {stated} instead of {expected}.",
    "Where does {stated} come from?",
    "The {slot} is wrong.",  # names no words: no grounding can place it
)
REPEATED = (
    "It repeats: {clause}.",
    "'{repeat}' is redundant.",
    "{value} is mentioned twice.",
    "It says the {slot} again at the end.",  # names no words
)
OMITTED = ("It forgets the {slot}.", "No mention of the {slot} ({expected}).")
PRAISE = ("The {slot} ({value}) is right.", "Good that it has {value}.", "Correct about {value}.")
FLAWLESS = ("Looks good.", "All correct.", "Accurate summary, nothing to add.")


def _sentence(flaw: dict, response: str, rng: random.Random) -> str:
    slot = rng.choice(SLOT_WORDS[flaw["slot"]])
    if flaw["type"] == "omitted":
        return rng.choice(OMITTED).format(slot=slot, expected=flaw["expected"])
    if flaw["type"] == "redundant":
        value = flaw["stated"] or flaw["expected"]
        start = response.find("Also, ", response.find(" " + value))  # the repeat of this slot's clause
        repeat = response[start : response.index(".", start)] if start >= 0 else value
        clause = repeat.removeprefix("Also, ")
        return rng.choice(REPEATED).format(clause=clause, repeat=repeat, value=value.capitalize(), slot=slot)
    return rng.choice(WRONG_VALUE).format(slot=slot, stated=flaw["stated"], expected=flaw["expected"])


def human_critique(response: str, facts: dict[str, str], flaws: list[dict], rng: random.Random) -> str:
    """A critique of ``response`` in a person's words, from its ground-truth ``flaws`` (see the module docstring)."""
    if not flaws:
        return rng.choice(FLAWLESS)
    sentences = [_sentence(f, response, rng) for f in flaws]
    flawed = {f["slot"] for f in flaws}
    right = [s for s in facts if s not in flawed and f" {facts[s]}" in response]
    if right and rng.random() < 0.3:
        slot = rng.choice(right)
        praise = rng.choice(PRAISE).format(slot=rng.choice(SLOT_WORDS[slot]), value=facts[slot])
        sentences.insert(rng.randrange(len(sentences) + 1), praise)
    return " ".join(sentences)


def make_human_feedback(n_items: int, seed: int = 0) -> pd.DataFrame:
    """``n_items`` demo summaries with human-style critiques and no references (feedback schema, validated)."""
    rng = random.Random(seed)
    words = random.Random(seed + 7919)  # the wording has its own stream: the items match make_demo_feedback's
    rows = []
    for i in range(n_items):
        item = S.make_item(rng)
        meta = {"facts": item.facts, "gold_spans": item.gold_spans, "flaws": item.flaws}
        rows.append(
            {
                "id": demo_id("summarization", seed, i),
                "task": "summarization",
                "prompt": item.post,
                "response": item.response,
                "critique": human_critique(item.response, item.facts, item.flaws, words),
                "reference": None,
                "tests": None,
                "entry_point": None,
                "meta": json.dumps(meta),
            }
        )
    return validate_frame(pd.DataFrame(rows), FEEDBACK, "demo:human-critiques")


def grounding_quality(feedback: pd.DataFrame, annotations: pd.DataFrame) -> dict[str, float]:
    """How well ``annotations``' spans match the ground truth of ``feedback``'s demo items (micro-averaged):

    - ``poor_char_{precision,recall,f1}``: characters of the quoted poor spans against the true negative spans;
    - ``poor_span_{precision,recall,f1}``: poor spans matched one-to-one at IoU >= 0.5;
    - ``recall_{invented,swapped,redundant}``: the character recall of each flaw type;
    - ``good_span_precision``: quoted good spans that are correct values (IoU >= 0.5).
    """
    from t2g_core.spans import align_feedback

    by_id = annotations.set_index("id")
    tp = n_pred = n_true = 0
    caught = {t: [0, 0] for t in ("invented", "swapped", "redundant")}
    poor_sets, good_sets = [], []
    for row in feedback.itertuples(index=False):
        meta = json.loads(row.meta)
        truth = S.typed_spans(row.response, meta["facts"])
        ann = by_id.loc[row.id]
        located = align_feedback(row.response, (list(ann["good_spans"]), list(ann["poor_spans"])))
        pred = [(s.start, s.end, s.label) for s in located if s.start is not None]
        true_spans = [(t["start"], t["end"], t["label"]) for t in truth]
        poor_sets.append(
            span_prf([p for p in pred if p[2] == "negative"], [t for t in true_spans if t[2] == "negative"])
        )
        good_sets.append(
            span_prf([p for p in pred if p[2] == "positive"], [t for t in true_spans if t[2] == "positive"])
        )
        predicted = {c for a, b, lab in pred if lab == "negative" for c in range(a, b)}
        true_chars = {c for t in truth if t["label"] == "negative" for c in range(t["start"], t["end"])}
        tp, n_pred, n_true = tp + len(predicted & true_chars), n_pred + len(predicted), n_true + len(true_chars)
        for t in truth:
            if t["type"] in caught:
                chars = set(range(t["start"], t["end"]))
                caught[t["type"]][0] += len(chars & predicted)
                caught[t["type"]][1] += len(chars)
    p, r = (tp / n_pred if n_pred else 0.0), (tp / n_true if n_true else 0.0)
    poor, good = micro_prf(poor_sets), micro_prf(good_sets)
    out = {"poor_char_precision": p, "poor_char_recall": r, "poor_char_f1": 2 * p * r / (p + r) if p + r else 0.0}
    out |= {f"poor_span_{k}": poor[k] for k in ("precision", "recall", "f1")}
    out |= {f"recall_{t}": hit / n for t, (hit, n) in caught.items() if n}
    return out | {"good_span_precision": good["precision"], "n_items": float(len(feedback))}
