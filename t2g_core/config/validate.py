"""Validation stage: gates on annotation quality and human-alignment review."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig


class ValidateConfig(StageConfig):
    max_unmatched_rate: float = Field(0.05, ge=0, le=1, description="Fail when more than this fraction of spans is unmatched.")
    max_parse_failure_rate: float = Field(0.05, ge=0, le=1, description="Fail when more than this fraction of items failed to parse.")
    max_no_span_rate: float = Field(0.5, ge=0, le=1, description="Fail when more than this fraction of ok items has no span.")
    min_minority_label_frac: float = Field(0.05, ge=0, le=0.5, description="Fail when positive or negative spans are rarer than this.")
    min_labelled_token_frac: float = Field(0.02, ge=0, le=1, description="Fail when fewer response tokens than this are labelled.")
    max_labelled_token_frac: float = Field(0.9, ge=0, le=1, description="Fail when more response tokens than this are labelled.")
    review: Literal["auto", "ui", "offline", "none"] = Field(
        "auto", description="Human-alignment review: auto = programmatic reviewer against ground truth; ui = Prefect pause form; offline = HTML page."
    )
    sample_size: int = Field(24, ge=1, description="Items drawn for human-alignment review (stratified by task, annotator, label).")
    sample_seed: int = Field(0, description="Seed of the review sample.")
    min_alignment: float = Field(0.8, ge=0, le=1, description="Gate: human alignment must reach this.")
    alignment_gate_on: Literal["lower_bound", "point"] = Field(
        "lower_bound", description="Compare the Wilson 95% lower bound or the point estimate with min_alignment."
    )
    review_timeout_s: int = Field(3600, ge=10, description="How long the UI review waits for input.")
