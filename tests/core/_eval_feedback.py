"""Summarization feedback whose references state a name and a city: the evaluation tests' prompts."""

from __future__ import annotations

import pandas as pd

CITIES = ["Paris", "Quito", "Oslo", "Lima", "Rome", "Cairo"]
NAMES = ["Ada", "Ben", "Cai", "Dora", "Eli"]


def _feedback(n: int = 30) -> pd.DataFrame:
    rows = []
    for i in range(n):
        name, city = NAMES[i % 5], CITIES[i % 6]
        ref = (
            f"This is {name}, who lives in {city} with 3 gray dogs, works as a coach, rests on Sunday and loves beans."
        )
        rows.append(
            {
                "id": f"sum-{i:03d}",
                "task": "summarization",
                "prompt": f"I am {name}. I live in {city}.",
                "response": "old",
                "critique": None,
                "reference": ref,
                "tests": None,
                "entry_point": None,
                "meta": None,
            }
        )
    rows.append({**rows[0], "id": "qa-000", "task": "qa"})
    return pd.DataFrame(rows)
