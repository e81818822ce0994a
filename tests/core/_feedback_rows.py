"""Three valid feedback rows (one per task) and a JSONL writer: the feedback loader's and ``t2g feedback check``'s
inputs."""

from __future__ import annotations

import json

ROWS = [
    {
        "id": "a",
        "task": "summarization",
        "prompt": "p1",
        "response": "r1",
        "reference": "ref",
        "meta": {"facts": {"city": "oslo"}},
    },
    {"id": "b", "task": "qa", "prompt": "p2", "response": "r2", "critique": "too vague"},
    {
        "id": "c",
        "task": "code",
        "prompt": "def f():",
        "response": "  return 1",
        "tests": "def check(c): assert c() == 1",
        "entry_point": "f",
    },
]


def _jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path
