"""Alignment stage: quoted spans -> character offsets -> token labels."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig

RENAMED = {
    "good_span_reward": "span_reward (good_per_span | per_span | per_token)",
    "poor_span_reward": "span_reward (good_per_span | per_span | per_token)",
    "neutral_value": "`fixed at 0` (a token outside every span carries no critique; a value there paid length)",
}


class AlignConfig(StageConfig):
    SECTION = "align"
    RENAMED = RENAMED
    fuzzy_threshold: float = Field(
        85.0, ge=0, le=100, description="Minimum rapidfuzz partial-alignment score (0-100) for a fuzzy span match."
    )
    min_fuzzy_chars: int = Field(
        8, ge=1, description="Spans shorter than this (ignoring whitespace) are never matched fuzzily."
    )
    use_critique_context: bool = Field(
        False,
        description="When a quote occurs several times, pick the occurrence whose surroundings best match the "
        "critique.",
    )
    annotator: str | None = Field(
        None, description="Use only this annotator's rows when the annotations hold several per item."
    )
    overlap: Literal["poor_wins", "good_wins"] = Field(
        "poor_wins", description="Label of a token inside both a good and a poor span."
    )
    repeated_good_spans: Literal["once", "each"] = Field(
        "once",
        description="PPO: a good span repeating an earlier good span's text earns nothing (once) or its label again "
        "(each).",
    )
    span_reward: Literal["good_per_span", "per_span", "per_token"] = Field(
        "good_per_span",
        description="PPO: good spans' tokens share the label, poor ones' each get all of it; or both share; or both "
        "per token.",
    )
    positive_value: float = Field(1.0, description="Token label for good spans (tokens outside every span get 0).")
    negative_value: float = Field(-1.0, description="Token label for poor spans.")
