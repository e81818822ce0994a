"""Small synthetic batches (feedback + annotations + spans) with controlled defects, for tests and self-checks.

Each item is a summary of six facts, ``n_wrong`` of them wrong (gold negative spans). Defects: ``unmatched`` quotes,
``flip``ped labels, ``all_positive``, ``failed`` annotations. Spans are located with ``str.find``, so the batch does
not depend on the aligner under test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

NAMES = ["Alice", "Bruno", "Chen", "Dana", "Emil", "Farah", "Goran", "Hana"]
CITIES = ["Paris", "Lagos", "Quito", "Oslo", "Hanoi", "Perth", "Cairo", "Lima"]
JOBS = ["baker", "nurse", "pilot", "tailor", "welder", "chemist", "judge", "farmer"]
PETS = ["a cat", "a parrot", "two dogs", "a goat", "a turtle", "a hamster", "a horse", "an iguana"]
YEARS = [str(y) for y in range(2001, 2021)]
SPORTS = ["tennis", "chess", "rowing", "boxing", "fencing", "curling", "judo", "golf"]
TEMPLATE = "{name} moved to {city} in {year}. {name} works as a {job}, keeps {pet} and plays {sport} on Sundays."
SLOTS = ("city", "year", "job", "pet", "sport")
POOLS = {"city": CITIES, "year": YEARS, "job": JOBS, "pet": PETS, "sport": SPORTS}


@dataclass(frozen=True)
class SyntheticBatch:
    feedback: pd.DataFrame
    annotations: pd.DataFrame
    spans: pd.DataFrame


def _item(i: int, rng: np.random.Generator, n_wrong: int) -> tuple[dict, list[tuple[str, str]]]:
    facts = {"name": NAMES[i % len(NAMES)]} | {s: str(rng.choice(POOLS[s])) for s in SLOTS}
    wrong = set(rng.choice(SLOTS, size=n_wrong, replace=False).tolist()) if n_wrong else set()
    said = dict(facts)
    for s in wrong:
        said[s] = str(rng.choice([v for v in POOLS[s] if v != facts[s]]))
    response = TEMPLATE.format(**said)
    gold, quotes = [], []
    for s in SLOTS:
        start = response.index(said[s])
        label = "negative" if s in wrong else "positive"
        gold.append({"start": start, "end": start + len(said[s]), "label": label, "slot": s})
        quotes.append((said[s], label))
    feedback = {
        "prompt": TEMPLATE.format(**facts) + " That is the whole post.",
        "response": response,
        "reference": TEMPLATE.format(**facts),
        "meta": json.dumps({"facts": facts, "gold_spans": gold, "flaws": sorted(wrong)}),
    }
    return feedback, quotes


def _defects(
    quotes: list[tuple[str, str]], rng: np.random.Generator, unmatched: float, flip: float, all_positive: bool
):
    out = []
    for text, label in quotes:
        if rng.random() < unmatched:
            text = text + " xyzzy"
        if rng.random() < flip:
            label = "positive" if label == "negative" else "negative"
        out.append((text, "positive" if all_positive else label))
    return out


def _spans(item_id: str, response: str, quotes: list[tuple[str, str]]) -> list[dict]:
    rows = []
    for k, (text, label) in enumerate(quotes):
        start = response.find(text)
        found = start >= 0
        rows.append(
            {
                "id": item_id,
                "span_index": k,
                "label": label,
                "text": text,
                "start": start if found else None,
                "end": start + len(text) if found else None,
                "match": "exact" if found else "unmatched",
                "score": 100.0 if found else 0.0,
            }
        )
    return rows


def make_synthetic_batch(
    n_items: int = 40,
    seed: int = 0,
    *,
    unmatched: float = 0.0,
    flip: float = 0.0,
    all_positive: bool = False,
    failed: float = 0.0,
    annotators: tuple[str, ...] = ("critic-a", "critic-b"),
    task: str = "summarization",
    id_prefix: str = "sum",
) -> SyntheticBatch:
    rng = np.random.default_rng(seed)
    fb_rows, ann_rows, span_rows = [], [], []
    for i in range(n_items):
        item_id = f"{id_prefix}-{i:05d}"
        fb, quotes = _item(i, rng, n_wrong=int(rng.integers(0, 3)))
        fb_rows.append({"id": item_id, "task": task, "critique": None, "tests": None, "entry_point": None, **fb})
        quotes = _defects(quotes, rng, unmatched, flip, all_positive)
        ok = rng.random() >= failed
        good = [t for t, lab in quotes if lab == "positive"] if ok else []
        poor = [t for t, lab in quotes if lab == "negative"] if ok else []
        critique = (
            ("The summary gets " + ", ".join(poor) + " wrong." if poor else "The summary is faithful.") if ok else None
        )
        ann_rows.append(
            {
                "id": item_id,
                "annotator": annotators[i % len(annotators)],
                "critique": critique,
                "good_spans": good,
                "poor_spans": poor,
                "reasoning": None,
                "status": "ok" if ok else "api_error",
                "error": None if ok else "HTTP 503 from the endpoint",
                "raw": None,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "latency_s": 0.0,
            }
        )
        if ok:
            span_rows += _spans(item_id, fb["response"], quotes)
    spans = pd.DataFrame(span_rows, columns=["id", "span_index", "label", "text", "start", "end", "match", "score"])
    spans = spans.astype({"start": "Int64", "end": "Int64"})
    return SyntheticBatch(pd.DataFrame(fb_rows), pd.DataFrame(ann_rows), spans)
