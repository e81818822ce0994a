"""Synthetic fact-grounded summarization with ground truth, designed so that span rewards can show their effect.

A post states 8 facts in shuffled order; the reference summary puts them into one fixed template, and responses carry
controlled flaws (``FLAW_TYPES``) whose character spans are recorded by construction. Why this shape (one induction
step per value, disjoint vocabularies, eight facts): docs/benchmarks.md, "The demo task".
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from t2g_core.demo.facts import read_facts
from t2g_core.demo.slots import SLOTS, TEMPLATE, VOCAB

POST_SENTENCES = {
    "name": "I am named {}.",
    "city": "I live in {}.",
    "count": "I live with {} pets.",
    "pet": "They are all {}.",
    "color": "They are colored {}.",
    "job": "I work as a {}.",
    "day": "I rest on {}.",
    "food": "I enjoy eating {}.",
}
OPENING = "A person"
FLAW_TYPES = ("invented", "swapped", "omitted", "redundant")


# --------------------------------------------------------------------------------------------- generation
def sample_facts(rng: random.Random) -> dict[str, str]:
    return {slot: rng.choice(VOCAB[slot]) for slot in SLOTS}


def render_post(facts: dict[str, str], rng: random.Random) -> str:
    """The post: one sentence per fact, in a random order."""
    order = list(SLOTS)
    rng.shuffle(order)
    return " ".join(POST_SENTENCES[slot].format(facts[slot]) for slot in order)


@dataclass
class Rendered:
    text: str
    spans: list[dict] = field(default_factory=list)


def render_summary(stated: dict[str, str | None], facts: dict[str, str], repeat: tuple[str, ...] = ()) -> Rendered:
    """Fill the template with ``stated`` values (None = clause omitted), then append repeated clauses.

    Spans are recorded while the text is built: each stated value is positive iff it equals the fact; a repeated
    clause ("Also, rests on Sunday") is one negative span.
    """
    text, spans = OPENING, []
    for slot, before, after in TEMPLATE:
        value = stated.get(slot)
        if value is None:
            continue
        text += before
        label = "positive" if value == facts[slot] else "negative"
        spans.append({"start": len(text), "end": len(text) + len(value), "label": label, "slot": slot})
        text += value + after
    text += "."
    for slot in repeat:
        clause = "Also, " + _clause(slot, stated[slot] or facts[slot])
        text += " "
        spans.append({"start": len(text), "end": len(text) + len(clause), "label": "negative", "slot": slot})
        text += clause + "."
    return Rendered(text, spans)


def _clause(slot: str, value: str) -> str:
    """A clause on its own: "rests on Sunday", "with 3 pets"."""
    _, before, after = next(t for t in TEMPLATE if t[0] == slot)
    return before.lstrip(", ").removeprefix("and ") + value + after


def reference_summary(facts: dict[str, str]) -> str:
    return render_summary(dict(facts), facts).text


def _other(rng: random.Random, slot: str, value: str) -> str:
    return rng.choice([v for v in VOCAB[slot] if v != value])


def apply_flaws(
    facts: dict[str, str], flaws: list[str], rng: random.Random
) -> tuple[dict[str, str | None], tuple[str, ...], list[dict]]:
    """Turn flaw types into stated values, repeated clauses and flaw records ({type, slot, stated, expected})."""
    stated: dict[str, str | None] = dict(facts)
    repeat: list[str] = []
    records: list[dict] = []
    free = list(SLOTS)
    rng.shuffle(free)
    for kind in flaws:
        if kind == "swapped" and len(free) >= 2:
            a, b = free.pop(), free.pop()
            stated[a], stated[b] = facts[b], facts[a]
            records += [
                {"type": "swapped", "slot": a, "stated": facts[b], "expected": facts[a], "with": b},
                {"type": "swapped", "slot": b, "stated": facts[a], "expected": facts[b], "with": a},
            ]
            continue
        if not free:
            continue
        slot = free.pop()
        if kind == "invented":
            stated[slot] = _other(rng, slot, facts[slot])
        elif kind == "omitted":
            stated[slot] = None
        elif kind == "redundant":
            repeat.append(slot)
        records.append({"type": kind, "slot": slot, "stated": stated[slot], "expected": facts[slot]})
    return stated, tuple(repeat), records


@dataclass(frozen=True)
class SummaryItem:
    post: str
    response: str
    reference: str
    facts: dict[str, str]
    gold_spans: list[dict]
    flaws: list[dict]


def make_item(rng: random.Random, p_flawless: float = 0.25, max_flaws: int = 3) -> SummaryItem:
    """One post with a flawed (or, with probability ``p_flawless``, flawless) summary."""
    facts = sample_facts(rng)
    post = render_post(facts, rng)
    kinds = [] if rng.random() < p_flawless else [rng.choice(FLAW_TYPES) for _ in range(rng.randint(1, max_flaws))]
    stated, repeat, records = apply_flaws(facts, kinds, rng)
    rendered = render_summary(stated, facts, repeat)
    return SummaryItem(post, rendered.text, reference_summary(facts), facts, rendered.spans, records)


def warm_start_pairs(n: int, seed: int, p_halluc: float = 0.35) -> list[tuple[str, str]]:
    """(post, summary) pairs where each fact is independently replaced by a wrong value with probability
    ``p_halluc``."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        facts = sample_facts(rng)
        post = render_post(facts, rng)
        stated = {s: (_other(rng, s, v) if rng.random() < p_halluc else v) for s, v in facts.items()}
        pairs.append((post, render_summary(stated, facts).text))
    return pairs


# --------------------------------------------------------------------------------------------- parsing and scoring
_WORD = r"([^\s,.]+)"
_ALSO = r"(?:\bAlso, )?"
_CLAUSE_RE = {
    slot: re.compile(_ALSO + r"\b" + re.escape(before.lstrip(", ").removeprefix("and ")) + _WORD + re.escape(after))
    for slot, before, after in TEMPLATE
}


def parse_summary(response: str) -> tuple[dict[str, tuple[str, int, int]], list[tuple[str, int, int]]]:
    """Claims per slot ``slot -> (value, start, end)`` (first mention) and repeats ``(slot, start, end)``.

    A slot's claim is the word after its keyword ("rests on <day>"); a later mention or an "Also, ..." clause
    is a repeat.
    """
    claims: dict[str, tuple[str, int, int]] = {}
    repeats: list[tuple[str, int, int]] = []
    for slot, pattern in _CLAUSE_RE.items():
        for m in pattern.finditer(response):
            if slot not in claims and not m.group(0).startswith("Also, "):
                claims[slot] = (m.group(1), m.start(1), m.end(1))
            else:
                repeats.append((slot, m.start(), m.end()))
    return claims, repeats


def summary_spans(response: str, facts: dict[str, str]) -> list[dict]:
    """Gold spans of any response: right values positive, wrong values and repeated clauses negative (the values are
    read by :func:`t2g_core.demo.facts.read_facts`: the template's clauses, then free-text mentions)."""
    return [{k: v for k, v in span.items() if k != "type"} for span in typed_spans(response, facts)]


def typed_spans(response: str, facts: dict[str, str]) -> list[dict]:
    """:func:`summary_spans` with each span's ``type``: ``correct``, ``invented`` (a value none of the post's facts),
    ``swapped`` (another slot's value) or ``redundant`` (a repeated clause): how reward models are scored per flaw."""
    reading = read_facts(response, facts)
    fact_values = {v.casefold() for v in facts.values()}
    spans = []
    for slot, mentions in reading.mentions.items():
        for m in mentions:
            right = reading.correct(m)
            kind = "correct" if right else ("swapped" if m.value.strip().casefold() in fact_values else "invented")
            label = "positive" if right else "negative"
            spans.append({"start": m.start, "end": m.end, "label": label, "slot": slot, "type": kind})
    spans += [
        {"start": s, "end": e, "label": "negative", "slot": slot, "type": "redundant"} for slot, s, e in reading.repeats
    ]
    return sorted(spans, key=lambda d: (d["start"], d["end"]))


@dataclass(frozen=True)
class SummaryScore:
    """Per-slot verdicts (``correct`` / ``wrong`` / ``missing``) and the aggregate task metrics of one response.

    - ``error`` = 1 - correct / K (the PPO benchmark's task error);
    - ``precision`` = correct / (stated values + repeats), 0.0 when nothing is stated; ``recall`` = correct / K;
    - ``invented``: wrong values that are none of the post's facts (hallucinated entities); ``swapped``: wrong values
      that belong to another slot of the post; ``invented_rate`` = invented / stated values (0.0 when none).
    """

    slots: dict[str, str]
    claims: dict[str, str | None]
    n_correct: int
    n_wrong: int
    n_missing: int
    n_redundant: int
    n_invented: int
    n_swapped: int
    precision: float
    recall: float
    error: float
    invented_rate: float

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def summary_errors(response: str, facts: dict[str, str]) -> SummaryScore:
    """Score ``response`` against the post's ``facts`` (see :class:`SummaryScore`), in the template or in free text
    (:func:`t2g_core.demo.facts.read_facts`): a fact is correct when only its value is stated, wrong when another
    value of its type is (the first such value is its claim), missing when it is not mentioned."""
    reading = read_facts(response, facts)
    verdicts: dict[str, str] = {}
    claims: dict[str, str | None] = {}
    invented = swapped = 0
    fact_values = {v.casefold() for v in facts.values()}
    for slot in facts:
        said = reading.stated(slot)
        wrong = [m for m in said if not reading.correct(m)]
        verdicts[slot] = "missing" if not said else ("wrong" if wrong else "correct")
        claims[slot] = (wrong or said)[0].value if said else None
        if wrong:
            if wrong[0].value.casefold() in fact_values:
                swapped += 1
            else:
                invented += 1
    k = len(facts)
    correct = sum(v == "correct" for v in verdicts.values())
    wrong_n = sum(v == "wrong" for v in verdicts.values())
    stated = correct + wrong_n
    repeats = len(reading.repeats)
    return SummaryScore(
        slots=verdicts,
        claims=claims,
        n_correct=correct,
        n_wrong=wrong_n,
        n_missing=k - stated,
        n_redundant=repeats,
        n_invented=invented,
        n_swapped=swapped,
        precision=correct / (stated + repeats) if stated + repeats else 0.0,
        recall=correct / k if k else 0.0,
        error=1.0 - correct / k if k else 0.0,
        invented_rate=invented / stated if stated else 0.0,
    )


def critique_text(response: str, facts: dict[str, str]) -> str:
    """A short reference critique in words ("The summary says Lima but the post says Quito."), from the parse."""
    score = summary_errors(response, facts)
    parts = []
    for slot, verdict in score.slots.items():
        if verdict == "wrong":
            parts.append(f"The summary says {score.claims[slot]} but the post says {facts[slot]}.")
        elif verdict == "missing":
            parts.append(f"The summary leaves out the {slot} ({facts[slot]}).")
    if score.n_redundant:
        parts.append("The summary repeats a fact.")
    return " ".join(parts) or "The summary states every fact of the post correctly."
