"""UltraFeedback, binarized (HuggingFaceH4/ultrafeedback_binarized): one row per chosen and per rejected response.

``prompt`` -> prompt; the last assistant message of ``chosen`` / ``rejected`` -> response (ids
``uf-<prompt_id>-chosen`` / ``-rejected``); scores, ``prompt_id`` and the side -> meta. No critique (the LLM annotator
writes it); reference: the chosen response, a silver reference for the offline reference critic.
"""

from __future__ import annotations

from typing import Any

from t2g_core.ingest.base import Adapter, IngestError, meta_json, register


def _assistant_text(messages: Any, where: str) -> str:
    if isinstance(messages, str):
        return messages
    turns = [m for m in list(messages) if isinstance(m, dict) and m.get("role") == "assistant"]
    if not turns:
        raise IngestError(where, "has no assistant message", column="chosen/rejected")
    return str(turns[-1].get("content", ""))


def ultrafeedback_rows(record: dict[str, Any], row: int) -> list[dict[str, Any]]:
    rows = []
    chosen = _assistant_text(record["chosen"], f"ultrafeedback row {row}")
    for side in ("chosen", "rejected"):
        rows.append(
            {
                "id": f"uf-{record['prompt_id']}-{side}",
                "task": "qa",
                "prompt": record["prompt"],
                "response": _assistant_text(record[side], f"ultrafeedback row {row}"),
                "reference": chosen,
                "meta": meta_json(
                    source="ultrafeedback",
                    prompt_id=record["prompt_id"],
                    side=side,
                    is_chosen=side == "chosen",
                    score=record.get(f"score_{side}"),
                    score_chosen=record.get("score_chosen"),
                    score_rejected=record.get("score_rejected"),
                ),
            }
        )
    return rows


ULTRAFEEDBACK = register(
    Adapter(
        name="ultrafeedback",
        hub_id="HuggingFaceH4/ultrafeedback_binarized",
        default_split="train_prefs",
        required=("prompt", "prompt_id", "chosen", "rejected", "score_chosen", "score_rejected"),
        convert=ultrafeedback_rows,
        description="UltraFeedback binarized preferences: one feedback row per chosen and per rejected response.",
    )
)
