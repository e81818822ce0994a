"""Stratified, reproducible review sample (strata: task x annotator x item label).

An item's label is ``positive``, ``negative``, ``mixed`` or ``none``; only ok items with a span or critique are
eligible. When the sample covers the strata, each gets one item and the rest goes to those furthest below their
proportional share; otherwise a seeded choice of strata gets one each. Draws use ``default_rng(seed)`` on id-sorted
strata, so the same inputs and seed give the same sample whatever the row order.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from t2g_core.review.models import ReviewItem, ReviewSample, ReviewSpan
from t2g_core.validation.batch import Batch


def item_label(labels: list[str]) -> str:
    kinds = set(labels)
    if not kinds:
        return "none"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def eligible_items(b: Batch) -> pd.DataFrame:
    """One row per reviewable item with its ``stratum`` (``task/annotator/label``)."""
    labels = b.spans.groupby("id")["label"].agg(list).to_dict()
    items = b.items[b.items["status"] == "ok"].drop_duplicates("id").copy()
    # typed as text even when no item is ok (an empty list would make a float column the strata cannot join)
    items["label"] = pd.Series([item_label(labels.get(i, [])) for i in items["id"]], index=items.index, dtype=str)
    items = items[(items["label"] != "none") | items["critique"].notna()]
    task = items["task"].fillna("unknown").astype(str)
    items["stratum"] = task + "/" + items["annotator"].astype(str) + "/" + items["label"]
    return items.sort_values("id", kind="stable").reset_index(drop=True)


def allocate(sizes: dict[str, int], n: int, rng: np.random.Generator) -> dict[str, int]:
    """How many items to draw from each stratum (sizes: stratum -> eligible items)."""
    total = sum(sizes.values())
    n = min(n, total)
    names = sorted(sizes)
    if n < len(names):
        chosen = set(rng.choice(names, size=n, replace=False).tolist())
        return {s: int(s in chosen) for s in names}
    alloc = {s: 1 for s in names}
    for _ in range(n - len(names)):
        open_ = [s for s in names if alloc[s] < sizes[s]]
        best = max(open_, key=lambda s: (sizes[s] * n / total - alloc[s], -names.index(s)))
        alloc[best] += 1
    return alloc


def draw_sample(b: Batch, size: int, seed: int) -> ReviewSample:
    """A stratified sample of ``size`` items (fewer when fewer are eligible) as a :class:`ReviewSample`."""
    items = eligible_items(b)
    rng = np.random.default_rng(seed)
    alloc = allocate(items.groupby("stratum").size().to_dict(), size, rng)
    picked: list[str] = []
    for stratum in sorted(alloc):
        ids = items.loc[items["stratum"] == stratum, "id"].tolist()
        picked += rng.choice(ids, size=alloc[stratum], replace=False).tolist() if alloc[stratum] else []
    chosen = items[items["id"].isin(set(picked))]
    by_id = dict(tuple(b.spans.sort_values(["id", "span_index"]).groupby("id")))
    review_items = [_review_item(r, by_id.get(r.id)) for r in chosen.itertuples()]
    key = hashlib.sha256(f"{seed}|{'|'.join(sorted(picked))}".encode()).hexdigest()[:16]
    return ReviewSample(key=key, seed=seed, items=review_items)


def _review_item(r, spans: pd.DataFrame | None) -> ReviewItem:
    rows = [] if spans is None else spans.to_dict("records")
    return ReviewItem(
        id=r.id,
        task=str(r.task) if isinstance(r.task, str) else "unknown",
        annotator=r.annotator,
        stratum=r.stratum,
        prompt=r.prompt if isinstance(r.prompt, str) else "",
        response=r.response if isinstance(r.response, str) else "",
        critique=r.critique if isinstance(r.critique, str) else None,
        spans=[
            ReviewSpan(
                span_index=int(s["span_index"]),
                label=s["label"],
                text=s["text"],
                start=None if pd.isna(s["start"]) else int(s["start"]),
                end=None if pd.isna(s["end"]) else int(s["end"]),
                match=s["match"],
            )
            for s in rows
        ],
    )
