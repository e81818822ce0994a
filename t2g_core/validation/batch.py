"""What the validation checks look at: annotations + spans, joined with the feedback when it is given.

``Batch.items``: one row per annotation (``id, annotator, status, error, critique, n_quoted, task, prompt, response,
gold``; ``gold`` from feedback ``meta.gold_spans``, None without ground truth; task and response null without
feedback). A span is attributed to the annotator of its item's first annotation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from t2g_core.schemas import ANNOTATIONS, FEEDBACK, SPANS, SchemaError, validate_frame

WORD_RE = re.compile(r"\w+|[^\w\s]")
GOLD_LABELS = {
    "positive": "positive",
    "good": "positive",
    "negative": "negative",
    "poor": "negative",
    "bad": "negative",
}


@dataclass(frozen=True)
class GoldSpan:
    start: int
    end: int
    label: str  # positive | negative


TokenOffsets = Callable[[str], list[tuple[int, int]]]  # text -> (start, end) of each token


def word_offsets(text: str) -> list[tuple[int, int]]:
    """Words and punctuation marks: the tokenizer-free default for the labelled-token check."""
    return [(m.start(), m.end()) for m in WORD_RE.finditer(text)]


def tokenizer_offsets(tokenizer) -> TokenOffsets:
    """Token offsets from a Hugging Face fast tokenizer (no special tokens), as the policy and reward model see it."""

    def offsets(text: str) -> list[tuple[int, int]]:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return [tuple(o) for o in enc["offset_mapping"]]

    return offsets


@dataclass(frozen=True)
class Batch:
    items: pd.DataFrame
    spans: pd.DataFrame
    token_offsets: TokenOffsets = word_offsets
    tokens_name: str = "words"

    def subset(self, mask: pd.Series) -> Batch:
        items = self.items[mask.to_numpy()]
        spans = self.spans[self.spans["id"].isin(set(items["id"]))]
        return Batch(items.reset_index(drop=True), spans, self.token_offsets, self.tokens_name)

    @property
    def has_responses(self) -> bool:
        return bool(self.items["response"].notna().any())

    @property
    def has_gold(self) -> bool:
        return bool(self.items["gold"].notna().any())


def parse_gold(meta: object, file: str = "feedback", row: int | None = None) -> list[GoldSpan] | None:
    """Ground-truth spans from a feedback ``meta`` JSON string; None when it has no ``gold_spans``."""
    if meta is None or (isinstance(meta, float) and pd.isna(meta)):
        return None
    data = json.loads(meta) if isinstance(meta, str) else meta
    if not isinstance(data, dict) or data.get("gold_spans") is None:
        return None
    out = []
    for g in data["gold_spans"]:
        label = GOLD_LABELS.get(str(g.get("label", "")).lower())
        if label is None:
            raise SchemaError(
                file, f"meta.gold_spans label {g.get('label')!r} is not positive/negative", column="meta", row=row
            )
        out.append(GoldSpan(int(g["start"]), int(g["end"]), label))
    return out


def _feedback_columns(feedback: pd.DataFrame | None) -> pd.DataFrame:
    cols = ["id", "task", "prompt", "response", "gold"]
    if feedback is None:
        return pd.DataFrame(columns=cols)
    fb = validate_frame(feedback, FEEDBACK, "feedback")
    gold = [parse_gold(m, "feedback", row) for row, m in enumerate(fb["meta"].tolist())]
    return fb.assign(gold=gold)[cols]


def make_batch(
    annotations: pd.DataFrame, spans: pd.DataFrame, feedback: pd.DataFrame | None = None, tokenizer=None
) -> Batch:
    """Validate the inputs against their schemas and join them into a :class:`Batch`.

    ``tokenizer`` (a fast Hugging Face tokenizer) makes the labelled-token check count its tokens instead of words.
    """
    ann = validate_frame(annotations, ANNOTATIONS, "annotations")
    sp = validate_frame(spans, SPANS, "spans")
    fb = _feedback_columns(feedback)
    items = ann[["id", "annotator", "status", "error", "critique"]].copy()
    items["n_quoted"] = [len(g) + len(p) for g, p in zip(ann["good_spans"], ann["poor_spans"], strict=True)]
    items = items.merge(fb, on="id", how="left")
    if feedback is not None:
        missing = sorted(set(items["id"]) - set(fb["id"]))
        if missing:
            raise SchemaError(
                "annotations", f"{len(missing)} id(s) not in the feedback, e.g. {missing[0]!r}", column="id"
            )
    items["gold"] = [g if isinstance(g, list) else None for g in items["gold"]]
    items = items.astype({"task": object, "prompt": object, "response": object})
    if tokenizer is None:
        return Batch(items=items.reset_index(drop=True), spans=sp)
    name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    return Batch(items.reset_index(drop=True), sp, tokenizer_offsets(tokenizer), f"tokens of {name}")
