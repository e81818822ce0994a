"""Synthetic fact-grounded summarization with ground truth (design measured in reference/demo_task_findings.md).

A post states K=8 facts, one short sentence each, in shuffled order ("I live in Quito."); the reference summary puts
the same facts into one fixed template, so a 2-layer model can learn it and must look each value up by its sentence:

    This is Cai, who lives in Quito with 3 gray dogs, works as a coach, rests on Sunday and loves beans.

Every value is one short word preceded by a space in both post and summary (one BPE token after the tokenizer has
seen the corpus), and the slot vocabularies are disjoint, so a value names its slot. Responses carry controlled flaws:

- ``invented``: a slot gets another value from its own vocabulary (a hallucinated entity or number);
- ``swapped``: two slots exchange their values (both are wrong, neither is invented);
- ``omitted``: a clause is dropped (``pet`` becomes the generic "pets");
- ``redundant``: a clause is repeated at the end ("Also, loves beans.").

The generator records, by construction, the character span of every stated value (positive when right, negative
when wrong) and of every repeated clause (negative). :func:`summary_spans` recovers the same spans from any text by
parsing the template, and :func:`summary_errors` scores a response against the facts (the task metric of PPO and
evaluation).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

SLOTS = ("name", "city", "count", "pet", "color", "job", "day", "food")
VOCAB: dict[str, tuple[str, ...]] = {
    "name": ("Ada", "Ben", "Cai", "Dora", "Eli", "Finn", "Gus", "Hana", "Ivo", "Jade", "Kim", "Lena"),
    "city": ("Paris", "Quito", "Oslo", "Lima", "Rome", "Cairo", "Dakar", "Hanoi", "Perth", "Riga"),
    "count": ("2", "3", "4", "5", "6", "7", "8", "9"),
    "pet": ("dogs", "cats", "birds", "goats", "ducks", "rabbits", "horses", "mice"),
    "color": ("gray", "black", "white", "brown", "red", "blue", "green", "yellow"),
    "job": ("coach", "baker", "nurse", "pilot", "judge", "farmer", "tailor", "driver", "painter", "chef"),
    "day": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "food": ("beans", "rice", "pasta", "soup", "bread", "tacos", "curry", "salad", "noodles", "cheese"),
}
POST_SENTENCES = {
    "name": "I am {}.",
    "city": "I live in {}.",
    "count": "I have {} pets.",
    "pet": "All of them are {}.",
    "color": "Their color is {}.",
    "job": "I work as a {}.",
    "day": "I rest on {}.",
    "food": "I love {}.",
}
# the summary template: (slot, text before the value) or (None, literal); the sentence ends with "."
TEMPLATE = (
    ("name", "This is "),
    ("city", ", who lives in "),
    (None, " with"),  # a literal: pet is always stated (at worst as "pets"), so the group always exists
    ("count", " "),
    ("color", " "),
    ("pet", " "),
    ("job", ", works as a "),
    ("day", ", rests on "),
    ("food", " and loves "),
)
OMITTABLE = ("city", "count", "color", "pet", "job", "day", "food")
REPEATABLE = ("city", "job", "day", "food")  # clauses with their own keyword, so a repeat reads as a repeat
SWAPPABLE = ("name", "city", "job", "day", "food")  # outside "with <count> <color> <pet>", whose parse is positional
GENERIC_PET = "pets"  # what an omitted pet leaves behind ("with 3 gray pets")
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


def render_summary(
    stated: dict[str, str | None], facts: dict[str, str], repeat: tuple[str, ...] = ()
) -> Rendered:
    """Fill the template with ``stated`` values (None = clause omitted), then append repeated clauses.

    Spans are recorded while the text is built: each stated value is positive iff it equals the fact; a repeated
    clause ("Also, loves beans") is one negative span.
    """
    text, spans = "", []
    for slot, before in TEMPLATE:
        if slot is None:
            text += before
            continue
        value = stated.get(slot)
        if value is None and slot == "pet":
            value = GENERIC_PET
        if value is None:
            continue
        text += before
        label = "positive" if value == facts[slot] else "negative"
        if value != GENERIC_PET or slot != "pet":
            spans.append({"start": len(text), "end": len(text) + len(value), "label": label, "slot": slot})
        text += value
    text += "."
    for slot in repeat:
        clause = "Also, " + _clause(slot, stated[slot] or facts[slot])
        text += " "
        spans.append({"start": len(text), "end": len(text) + len(clause), "label": "negative", "slot": slot})
        text += clause + "."
    return Rendered(text, spans)


def _clause(slot: str, value: str) -> str:
    before = dict(TEMPLATE)[slot]
    return before.lstrip(", ").removeprefix("and ").removeprefix("who ") + value


def reference_summary(facts: dict[str, str]) -> str:
    return render_summary(dict(facts), facts).text


def _other(rng: random.Random, slot: str, value: str) -> str:
    return rng.choice([v for v in VOCAB[slot] if v != value])


def apply_flaws(facts: dict[str, str], flaws: list[str], rng: random.Random) -> tuple[dict[str, str | None], tuple[str, ...], list[dict]]:
    """Turn flaw types into stated values, repeated clauses and flaw records ({type, slot, stated, expected})."""
    stated: dict[str, str | None] = dict(facts)
    repeat: list[str] = []
    records: list[dict] = []
    free = list(SLOTS)
    rng.shuffle(free)
    for kind in flaws:
        swappable = [s for s in free if s in SWAPPABLE]
        if kind == "swapped" and len(swappable) >= 2:
            a, b = swappable[:2]
            free.remove(a)
            free.remove(b)
            stated[a], stated[b] = facts[b], facts[a]
            records += [
                {"type": "swapped", "slot": a, "stated": facts[b], "expected": facts[a], "with": b},
                {"type": "swapped", "slot": b, "stated": facts[a], "expected": facts[b], "with": a},
            ]
            continue
        slot = next((s for s in free if kind != "omitted" or s in OMITTABLE), None)
        if kind == "redundant":
            slot = next((s for s in free if s in REPEATABLE), None)
        if slot is None:
            continue
        free.remove(slot)
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
    """(post, summary) pairs where each fact is independently replaced by a wrong value with probability ``p_halluc``."""
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
_CLAUSE_RE = {
    "name": re.compile(r"\bThis is " + _WORD),
    "city": re.compile(r"(?:\bAlso, )?\blives in " + _WORD),
    "job": re.compile(r"(?:\bAlso, )?\bworks as an? " + _WORD),
    "day": re.compile(r"(?:\bAlso, )?\brests on " + _WORD),
    "food": re.compile(r"(?:\bAlso, )?\bloves " + _WORD),
}
_GROUP_RE = re.compile(r"\bwith ((?:(?! and )[^,.])+)")  # "with 3 gray dogs" -> count, color, pet


def _group_claims(response: str) -> dict[str, tuple[str, int, int]]:
    """Slots of the "with <count> <color> <pet>" group; missing words leave their slot out."""
    m = _GROUP_RE.search(response)
    if not m:
        return {}
    words = [(w.group(), m.start(1) + w.start(), m.start(1) + w.end()) for w in re.finditer(r"\S+", m.group(1))]
    out: dict[str, tuple[str, int, int]] = {}
    if len(words) >= 3 or (len(words) == 2 and words[0][0].isdigit()):
        out["count"] = words.pop(0)
    if words:
        pet = words.pop()
        if pet[0] != GENERIC_PET:
            out["pet"] = pet
    if words:
        out["color"] = (" ".join(w[0] for w in words), words[0][1], words[-1][2])
    return out


def parse_summary(response: str) -> tuple[dict[str, tuple[str, int, int]], list[tuple[str, int, int]]]:
    """Claims per slot ``slot -> (value, start, end)`` (first mention) and repeats ``(slot, start, end)``."""
    claims: dict[str, tuple[str, int, int]] = dict(_group_claims(response))
    repeats: list[tuple[str, int, int]] = []
    for slot, pattern in _CLAUSE_RE.items():
        for i, m in enumerate(pattern.finditer(response)):
            if i == 0 and not m.group(0).startswith("Also, "):
                claims[slot] = (m.group(1), m.start(1), m.end(1))
            else:
                repeats.append((slot, m.start(), m.end()))
    return claims, repeats


def _same(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


def summary_spans(response: str, facts: dict[str, str]) -> list[dict]:
    """Gold spans of any response by parsing the template: right values positive, wrong values and repeats negative."""
    claims, repeats = parse_summary(response)
    spans = [
        {"start": s, "end": e, "label": "positive" if _same(v, facts[slot]) else "negative", "slot": slot}
        for slot, (v, s, e) in claims.items()
    ]
    spans += [{"start": s, "end": e, "label": "negative", "slot": slot} for slot, s, e in repeats]
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
    """Score ``response`` against the post's ``facts`` (see :class:`SummaryScore`)."""
    claims, repeats = parse_summary(response)
    verdicts: dict[str, str] = {}
    invented = swapped = 0
    fact_values = {v.casefold() for v in facts.values()}
    for slot in facts:
        if slot not in claims:
            verdicts[slot] = "missing"
        elif _same(claims[slot][0], facts[slot]):
            verdicts[slot] = "correct"
        else:
            verdicts[slot] = "wrong"
            if claims[slot][0].casefold() in fact_values:
                swapped += 1
            else:
                invented += 1
    k = len(facts)
    correct = sum(v == "correct" for v in verdicts.values())
    wrong = sum(v == "wrong" for v in verdicts.values())
    stated = correct + wrong
    return SummaryScore(
        slots=verdicts,
        claims={slot: (claims[slot][0] if slot in claims else None) for slot in facts},
        n_correct=correct,
        n_wrong=wrong,
        n_missing=k - stated,
        n_redundant=len(repeats),
        n_invented=invented,
        n_swapped=swapped,
        precision=correct / (stated + len(repeats)) if stated + len(repeats) else 0.0,
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
