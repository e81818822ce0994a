"""Validation stage: gates on annotation quality and human-alignment review."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig


class ValidateConfig(StageConfig):
    min_items: int = Field(
        1, ge=0, description="Fail when the annotations hold fewer items than this (an empty batch fails)."
    )
    max_unmatched_rate: float = Field(
        0.05, ge=0, le=1, description="Fail when more than this fraction of spans is unmatched (paper: under 2.5%)."
    )
    max_parse_failure_rate: float = Field(
        0.05, ge=0, le=1, description="Fail when more than this fraction of annotations has a status other than ok."
    )
    max_no_span_rate: float = Field(
        0.5, ge=0, le=1, description="Fail when more than this fraction of ok items has no span."
    )
    min_minority_label_frac: float = Field(
        0.05, ge=0, le=0.5, description="Fail when positive or negative spans are rarer than this."
    )
    min_labelled_token_frac: float = Field(
        0.02, ge=0, le=1, description="Fail when fewer response tokens than this are labelled."
    )
    max_labelled_token_frac: float = Field(
        0.9,
        ge=0,
        le=1,
        description="Fail when more response tokens than this are labelled (paper: spans ~30%, dense ~70%).",
    )
    min_span_f1: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Gate on span F1 against ground truth (feedback meta.gold_spans) when it exists; None = report "
        "only.",
    )
    gate_breakdowns: bool = Field(
        True,
        description="Also fail when one annotator or one task fails a check on its own (the whole batch may still "
        "pass it).",
    )
    worst_items: int = Field(5, ge=0, description="How many worst items the report names for each failed check.")
    review: Literal["auto", "ui", "offline", "none"] = Field(
        "auto",
        description="Human-alignment review: auto = programmatic reviewer against ground truth; ui = Prefect pause "
        "form; offline = HTML page.",
    )
    sample_size: int = Field(
        24, ge=1, description="Items drawn for human-alignment review (stratified by task, annotator, label)."
    )
    sample_seed: int = Field(0, description="Seed of the review sample.")
    min_alignment: float = Field(0.8, ge=0, le=1, description="Gate: human alignment must reach this (paper: 82-94%).")
    alignment_gate_on: Literal["lower_bound", "point"] = Field(
        "lower_bound", description="Compare the Wilson 95% lower bound or the point estimate with min_alignment."
    )
    alignment_gate_scope: Literal["per_task", "overall"] = Field(
        "per_task", description="Gate every task's alignment (per_task) or only the whole sample's (overall)."
    )
    review_timeout_s: int = Field(3600, ge=10, description="How long the UI review waits for input.")
