"""Before anything is annotated or built: does every feedback row have what the chosen annotator needs?

The reference critic reads ``reference``, the code critic ``tests`` and ``entry_point``, the grounding annotator (and
the LLM in grounding mode) a human ``critique``; the LLM also needs an endpoint and, unless local, an API key. When
more rows lack it than ``annotate.max_failure_rate`` allows, :func:`check` raises one :class:`PreflightError` naming
how many rows lack what and the annotators the rows do fit; rows under that rate get the status ``missing_input``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from t2g_core.config.annotate import AnnotateConfig

SHOWN_IDS = 5  # ids named in the message; the count says how many more


class PreflightError(ValueError):
    """The feedback rows do not carry what the chosen annotator needs (the message says which rows and what fits)."""


def _text(row: dict[str, Any], column: str) -> bool:
    value = row.get(column)
    return isinstance(value, str) and bool(value.strip())


@dataclass(frozen=True)
class Need:
    """What an annotator reads from one row: ``missing(row)`` is None when the row has it, else what it lacks."""

    setting: str  # how the message names the annotator
    missing: Callable[[dict[str, Any]], str | None]


def _reference(row: dict[str, Any]) -> str | None:
    if row.get("task") not in ("summarization", "qa"):
        return f"a summarization or QA task (not {row.get('task')!r})"
    return None if _text(row, "reference") else "a reference"


def _code(row: dict[str, Any]) -> str | None:
    if row.get("task") != "code":
        return f"a code task (not {row.get('task')!r})"
    lacks = [c for c in ("tests", "entry_point") if not _text(row, c)]
    return " and ".join({"tests": "tests", "entry_point": "an entry_point"}[c] for c in lacks) or None


def _critique(row: dict[str, Any]) -> str | None:
    return None if _text(row, "critique") else "a critique"


NEEDS: dict[tuple[str, str], Need] = {  # (annotator, LLM mode) -> what it reads
    ("reference", ""): Need("annotate.annotator=reference", _reference),
    ("code", ""): Need("annotate.annotator=code", _code),
    ("ground", ""): Need("annotate.annotator=ground", _critique),
    ("llm", "grounding"): Need("annotate.annotator=llm with annotate.mode=grounding", _critique),
    ("llm", "critique"): Need("annotate.annotator=llm", lambda _row: None),
}


def need_for(cfg: AnnotateConfig) -> Need:
    return NEEDS[(cfg.annotator, cfg.mode if cfg.annotator == "llm" else "")]


def _fits(rows: list[dict[str, Any]]) -> list[str]:
    """The annotators that every row fits, offline ones first."""
    offline = [
        ("annotate.annotator=ground (offline; or annotate.annotator=llm with annotate.mode=grounding)", _critique),
        ("annotate.annotator=reference", _reference),
        ("annotate.annotator=code", _code),
    ]
    fitting = [name for name, missing in offline if rows and all(missing(r) is None for r in rows)]
    return fitting or ["annotate.annotator=llm (an endpoint writes the critiques)"]


def _carries(rows: list[dict[str, Any]]) -> str:
    """'critiques and no references', 'references and tests', ... : what the rows hold, in words."""
    columns = {"critique": "critiques", "reference": "references", "tests": "tests"}
    have = [word for column, word in columns.items() if any(_text(r, column) for r in rows)]
    lack = [word for column, word in columns.items() if not any(_text(r, column) for r in rows)]
    said = " and ".join(have) if have else "no critiques, references or tests"
    return said + (f" and no {' or '.join(lack)}" if have and lack else "")


def _endpoint_problem(cfg: AnnotateConfig, has_key: bool | None) -> str | None:
    from t2g_core.annotators.llm import is_local

    if cfg.annotator != "llm":
        return None
    if not cfg.base_url:
        return "annotate.annotator=llm needs an endpoint: set annotate.base_url (e.g. http://127.0.0.1:8000/v1)"
    if has_key is False and not is_local(cfg.base_url):
        return (
            f"annotate.annotator=llm needs an API key for {cfg.base_url}: set ${cfg.api_key_env} in the environment "
            "of the process that runs the stage"
        )
    return None


def problems(rows: list[dict[str, Any]], cfg: AnnotateConfig, *, has_key: bool | None = None) -> str | None:
    """The one message about ``rows`` and ``cfg`` (None when annotation can go ahead). ``has_key``: whether an API
    key was found for the LLM annotator (None: not known here, e.g. a worker's environment will give it)."""
    from t2g_core.annotators import check_tasks

    endpoint = _endpoint_problem(cfg, has_key)
    if endpoint:
        return endpoint
    try:
        check_tasks(rows, cfg.annotator)  # a row of a task the critic does not handle: its row and column
    except ValueError as exc:
        return str(exc)
    need = need_for(cfg)
    lacking = [(r.get("id"), what) for r in rows if (what := need.missing(r)) is not None]
    if not lacking or len(lacking) <= cfg.max_failure_rate * len(rows):
        return None
    whats = sorted({what for _, what in lacking})
    ids = ", ".join(repr(i) for i, _ in lacking[:SHOWN_IDS]) + (", ..." if len(lacking) > SHOWN_IDS else "")
    return (
        f"{need.setting} needs {' / '.join(whats)} on every row, and {len(lacking)} of {len(rows)} rows have none "
        f"(ids {ids}; at most annotate.max_failure_rate {cfg.max_failure_rate:g} may). Your rows carry "
        f"{_carries(rows)}: use {' or '.join(_fits(rows))}."
    )


def check(feedback_df: pd.DataFrame, cfg: AnnotateConfig, *, has_key: bool | None = None) -> None:
    """Raise :class:`PreflightError` with :func:`problems`' message when the rows do not fit the annotator."""
    from t2g_core.annotators import feedback_rows

    message = problems(feedback_rows(feedback_df), cfg, has_key=has_key)
    if message:
        raise PreflightError(message)
