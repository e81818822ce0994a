"""A feedback frame and its annotations whose quotes match exactly, after normalisation, or not at all: the align
stage's inputs for the library, stage and command tests."""

from __future__ import annotations

import pandas as pd


def feedback_frame() -> pd.DataFrame:
    rows = [
        (
            "sum-1",
            "Alice lives in “Paris” and works as a nurse.",
        ),
        ("sum-2", "def f(x):\n        return x + 1\n"),
        ("sum-3", "Nothing to see here."),
    ]
    return pd.DataFrame(
        {
            "id": [r[0] for r in rows],
            "task": ["summarization", "code", "qa"],
            "prompt": ["p"] * 3,
            "response": [r[1] for r in rows],
            "critique": [None] * 3,
            "reference": [None] * 3,
            "tests": [None] * 3,
            "entry_point": [None] * 3,
            "meta": [None] * 3,
        }
    )


def annotations_frame(ids=("sum-1", "sum-2", "sum-3"), annotator="ref") -> pd.DataFrame:
    spans = {
        "sum-1": (["works as a nurse"], ['lives in "Paris"', "the weather in Rome"]),
        "sum-2": ([], ["def f(x):\n    return x + 1"]),
        "sum-3": ([], []),
    }
    return pd.DataFrame(
        {
            "id": list(ids),
            "annotator": [annotator] * len(ids),
            "critique": ["c"] * len(ids),
            "good_spans": [spans[i][0] for i in ids],
            "poor_spans": [spans[i][1] for i in ids],
            "reasoning": [None] * len(ids),
            "status": ["ok", "ok", "parse_error"][: len(ids)],
            "error": [None] * len(ids),
            "raw": [None] * len(ids),
            "prompt_tokens": [0] * len(ids),
            "completion_tokens": [0] * len(ids),
            "latency_s": [0.0] * len(ids),
        }
    )
