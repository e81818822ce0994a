"""SLF5K (Scheurer et al.): Reddit TL;DR posts with a model summary and human language feedback on it.

Mapping: ``post`` (+ ``title``, ``summary_prompt`` when present) -> prompt; ``generated_summary_for_feedback`` ->
response; human ``feedback`` -> critique (the LLM annotator's grounding mode ties it to spans);
``ideal_human_summary`` -> reference; ``subreddit`` and ``feedback_class`` -> meta.
"""

from __future__ import annotations

from typing import Any

from t2g_core.ingest.base import Adapter, meta_json, register


def _prompt(record: dict[str, Any]) -> str:
    title = (record.get("title") or "").strip()
    post = record["post"].strip()
    return f"TITLE: {title}\n\nPOST: {post}" if title else post


def slf5k_rows(record: dict[str, Any], row: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"slf5k-{record['id']}",
            "task": "summarization",
            "prompt": _prompt(record),
            "response": record["generated_summary_for_feedback"].strip(),
            "critique": (record.get("feedback") or None),
            "reference": record.get("ideal_human_summary") or None,
            "meta": meta_json(
                source="slf5k",
                subreddit=record.get("subreddit"),
                feedback_class=record.get("feedback_class"),
                summary_prompt=record.get("summary_prompt"),
            ),
        }
    ]


SLF5K = register(
    Adapter(
        name="slf5k",
        hub_id="JeremyAlain/SLF5K",
        default_split="train",
        required=("id", "post", "generated_summary_for_feedback", "feedback", "ideal_human_summary"),
        convert=slf5k_rows,
        description="SLF5K summaries with human feedback (critique) and ideal human summaries (reference).",
    )
)
