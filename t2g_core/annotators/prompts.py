"""Versioned annotation prompts: ``prompts/<task>.<version>.txt`` (or ``grounding.<version>.txt``).

A ``### system`` and a ``### user`` section, filled with :class:`string.Template` (JSON braces need no escaping). The
version is part of the answer-cache key: editing a prompt means adding ``v2`` files, never changing ``v1``.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from string import Template
from typing import Any

SPAN_JSON_SCHEMA: dict[str, Any] = {
    "name": "span_feedback",
    "strict": True,
    "schema": {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            "critique": {"type": "string"},
            "good_spans": {"type": "array", "items": {"type": "string"}},
            "poor_spans": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["reasoning", "critique", "good_spans", "poor_spans"],
        "additionalProperties": False,
    },
}


@functools.lru_cache(maxsize=64)
def load_prompt(name: str, version: str) -> tuple[Template, Template]:
    """(system, user) templates of ``prompts/<name>.<version>.txt``; a clear error names the missing file."""
    fname = f"{name}.{version}.txt"
    path = resources.files("t2g_core.annotators") / "prompts" / fname
    if not path.is_file():
        available = sorted(p.name for p in (resources.files("t2g_core.annotators") / "prompts").iterdir())
        raise FileNotFoundError(f"no annotation prompt {fname!r}; available: {', '.join(available)}")
    text = path.read_text(encoding="utf-8")
    parts = re.split(r"^### (system|user)\s*$", text, flags=re.M)
    sections = {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts) - 1, 2)}
    if set(sections) != {"system", "user"}:
        raise ValueError(f"prompt file {fname} needs a '### system' and a '### user' section")
    return Template(sections["system"]), Template(sections["user"])


class NotAskable(ValueError):
    """This item cannot be put to the annotator (a grounding item without a human critique): its own failure."""


def render_messages(row: dict[str, Any], mode: str, version: str) -> list[dict[str, str]]:
    """Chat messages for one feedback row. Grounding needs the row's human ``critique`` (NotAskable otherwise)."""
    if mode == "grounding" and not (row.get("critique") or "").strip():
        raise NotAskable(
            f"item {row.get('id')!r}: grounding mode needs a human critique, the 'critique' column is empty"
        )
    system, user = load_prompt("grounding" if mode == "grounding" else row["task"], version)
    tests = row.get("tests") or ""
    values = {
        "prompt": row.get("prompt") or "",
        "response": row.get("response") or "",
        "critique": row.get("critique") or "",
        "tests_block": f"\n<tests>\n{tests}\n</tests>\n" if tests else "",
    }
    return [
        {"role": "system", "content": system.safe_substitute(values)},
        {"role": "user", "content": user.safe_substitute(values)},
    ]
