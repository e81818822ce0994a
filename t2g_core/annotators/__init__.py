"""Annotation stage: one ``annotations`` row per feedback item from an LLM or a programmatic critic.

``annotate(feedback_df, cfg, api_key=..., cache_dir=...).frame`` never drops an item: each row ends with a status
(``ok``, ``parse_error``, ``api_error``, ``timeout``, ``sandbox_error``, ``refused``, ``missing_input``), the raw
answer and the error.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from t2g_core.annotators import ground
from t2g_core.annotators.cache import AnswerCache
from t2g_core.annotators.llm import LLMAnnotator, RunStats, feedback_row, item_cost
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.critics.code import CodeCritic
from t2g_core.critics.isolation import IsolationUnavailable, resolve
from t2g_core.critics.reference import ReferenceCritic
from t2g_core.critics.sandbox import sandbox_workers
from t2g_core.schemas import ANNOTATIONS, STATUSES, validate_frame
from t2g_core.spans import ParsedFeedback

__all__ = [
    "AnnotationRun",
    "CriticAnnotator",
    "LLMAnnotator",
    "annotate",
    "feedback_rows",
    "summarize",
]

CRITIC_TASKS = {"code": ("code",), "reference": ("summarization", "qa")}


@dataclass
class AnnotationRun:
    frame: pd.DataFrame  # annotations schema, one row per feedback item, in feedback order
    stats: dict[str, Any] = field(default_factory=dict)


def feedback_rows(feedback_df: pd.DataFrame) -> list[dict[str, Any]]:
    """Feedback rows as dicts with ``meta`` parsed to a dict (the critic contract); bad JSON names the row."""
    rows = []
    for i, row in enumerate(feedback_df.to_dict(orient="records")):
        meta = row.get("meta")
        try:
            row["meta"] = (
                json.loads(meta) if isinstance(meta, str) and meta.strip() else (meta if isinstance(meta, dict) else {})
            )
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(
                f"feedback row {i} (id {row.get('id')!r}), column 'meta': invalid JSON "
                f"({getattr(exc, 'msg', 'nested too deeply')})"
            ) from exc
        rows.append({k: (None if _isna(v) else v) for k, v in row.items()})
    return rows


def _isna(value: Any) -> bool:
    try:
        return value is None or (not isinstance(value, (dict, list, str)) and bool(pd.isna(value)))
    except (TypeError, ValueError):
        return False


class CriticAnnotator:
    """Runs a programmatic critic (``critique(row) -> ParsedFeedback``) over rows in a thread pool."""

    def __init__(self, name: str, critic: Any, workers: int):
        self.name, self.critic, self.workers = name, critic, workers
        self.stats = RunStats()
        self.isolation: str | None = None  # the sandbox backend, for critics that run code

    def _one(self, row: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            parsed = self.critic.critique(row)
        except Exception as exc:  # noqa: BLE001 - a critic bug on one item must not lose the others
            parsed = ParsedFeedback(None, status="sandbox_error", error=f"critic failed: {type(exc).__name__}: {exc}")
        return feedback_row(row["id"], self.name, parsed, 0, 0, time.perf_counter() - start)

    def annotate(
        self, rows: list[dict[str, Any]], refresh_ids: Any = (), progress: bool = True
    ) -> list[dict[str, Any]]:
        from tqdm.auto import tqdm

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            done = pool.map(self._one, rows)
            return list(tqdm(done, total=len(rows), desc=f"annotate ({self.name})", unit="item", disable=not progress))


def make_annotator(
    cfg: AnnotateConfig, api_key: str | None, cache: AnswerCache | None, log: Callable[[str], None] | None = None
) -> LLMAnnotator | CriticAnnotator:
    if cfg.annotator == "llm":
        return LLMAnnotator(cfg, api_key=api_key, cache=cache, log=log)
    if cfg.annotator == "code":
        try:  # refuse before the first item rather than fail every one
            backend = resolve(cfg.sandbox_isolation).backend
        except IsolationUnavailable as exc:
            raise ValueError(str(exc)) from None
        annotator = CriticAnnotator("code", CodeCritic.from_config(cfg), workers=sandbox_workers(cfg.concurrency))
        annotator.isolation = backend
        return annotator
    if cfg.annotator == "ground":
        return CriticAnnotator(ground.NAME, ground.GroundingCritic(), workers=1)
    return CriticAnnotator("reference", ReferenceCritic(), workers=1)


def check_tasks(rows: list[dict[str, Any]], annotator: str) -> None:
    tasks = CRITIC_TASKS.get(annotator)
    for i, row in enumerate(rows):
        if tasks and row["task"] not in tasks:
            raise ValueError(
                f"feedback row {i} (id {row['id']!r}), column 'task': the {annotator} critic handles "
                f"{'/'.join(tasks)}, not {row['task']!r}; use --annotator llm or split the feedback by task"
            )


def annotate(
    feedback_df: pd.DataFrame,
    cfg: AnnotateConfig,
    *,
    api_key: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    previous: pd.DataFrame | None = None,
    log: Callable[[str], None] | None = None,
) -> AnnotationRun:
    """Annotate every item; with ``cfg.only_failed`` keep ``previous`` ok rows and redo (uncached) the rest. ``log``
    hears what the LLM annotator finds out about its endpoint (one line each; also in the statistics' ``notes``)."""
    rows = feedback_rows(feedback_df)
    check_tasks(rows, cfg.annotator)
    kept: dict[str, dict[str, Any]] = {}
    if cfg.only_failed:
        if previous is None:
            raise ValueError("only_failed needs the previous annotations (previous=...)")
        prev = validate_frame(previous, ANNOTATIONS, "previous annotations")
        kept = {r["id"]: r for r in prev.to_dict(orient="records") if r["status"] == "ok"}
    todo = [r for r in rows if r["id"] not in kept]
    cache = AnswerCache(cache_dir) if cache_dir and cfg.annotator == "llm" else None
    try:
        annotator = make_annotator(cfg, api_key, cache, log)
        refresh = [r["id"] for r in todo] if cfg.only_failed else ()
        done = {r["id"]: r for r in annotator.annotate(todo, refresh_ids=refresh, progress=progress)}
    finally:
        if cache is not None:
            cache.close()
    out = [dict(kept[r["id"]], annotator=annotator.name) if r["id"] in kept else done[r["id"]] for r in rows]
    frame = validate_frame(pd.DataFrame(out, columns=ANNOTATIONS.names), ANNOTATIONS, "annotations")
    stats = summarize(frame, cfg, annotator.stats, n_kept=len(kept))
    stats["sandbox_isolation"] = getattr(annotator, "isolation", None)
    return AnnotationRun(frame, stats)


def summarize(frame: pd.DataFrame, cfg: AnnotateConfig, run: RunStats | None = None, n_kept: int = 0) -> dict[str, Any]:
    """Counts per status, tokens and cost (of all rows, and of this run's live requests)."""
    counts = Counter(frame["status"])
    pt, ct = int(frame["prompt_tokens"].sum()), int(frame["completion_tokens"].sum())
    failed = frame[frame["status"] != "ok"].drop_duplicates("status")
    return {
        "n_items": len(frame),
        "status_counts": {s: int(counts.get(s, 0)) for s in STATUSES},
        "first_errors": {r.status: f"{r.id}: {str(r.error or '')[:200]}" for r in failed.itertuples()},
        "prompt_tokens": pt,
        "completion_tokens": ct,
        "cost": item_cost(pt, ct, cfg),
        "requests": run.requests if run else 0,
        "cache_hits": run.cache_hits if run else 0,
        "cost_this_run": run.cost if run else 0.0,
        "kept_from_previous": n_kept,
        "structured_output": run.structured_output if run else None,
        "answer_formats": dict(run.formats) if run else {},
        "notes": list(run.notes) if run else [],
    }
