"""Alignment stage: quoted spans -> character offsets -> token labels."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig


class AlignConfig(StageConfig):
    fuzzy_threshold: float = Field(
        85.0, ge=0, le=100, description="Minimum rapidfuzz partial-alignment score (0-100) for a fuzzy span match."
    )
    min_fuzzy_chars: int = Field(
        8, ge=1, description="Spans shorter than this (ignoring whitespace) are never matched fuzzily."
    )
    use_critique_context: bool = Field(
        False,
        description="When a quoted phrase occurs several times, pick the occurrence whose surroundings best match "
        "the critique (else the first unclaimed one).",
    )
    annotator: str | None = Field(
        None, description="Use only this annotator's rows when the annotations hold several per item."
    )
    overlap: Literal["poor_wins", "good_wins"] = Field(
        "poor_wins", description="Label of a token inside both a good and a poor span."
    )
    repeated_good_spans: Literal["once", "each"] = Field(
        "once",
        description="PPO rollouts: a good span whose text already appeared as a good span earlier in the response "
        "earns nothing (once) or its label again (each). With 'each' a policy can farm a reward model's +1s by "
        "repeating what it got right.",
    )
    good_span_reward: Literal["per_span", "per_token"] = Field(
        "per_span",
        description="PPO rollouts: per_span = the tokens of a good span share its label (each gets label / n), so a "
        "good span pays the same however long it grows; per_token = each of its tokens gets the whole label (the "
        "paper's). A reward model that calls a run of repeated words one good span can be farmed by length under "
        "per_token.",
    )
    poor_span_reward: Literal["per_span", "per_token"] = Field(
        "per_token",
        description="PPO rollouts: per_span = the tokens of a poor span share its label, so a wrong value costs what "
        "a right one earns and what leaving it out costs (omission_penalty 1), however many tokens it takes; "
        "per_token = each of its tokens gets the whole label (the paper's), so a wrong multi-token value costs more "
        "than a right one earns (docs/ppo.md has the measurement behind the default).",
    )
    positive_value: float = Field(1.0, description="Token label for good spans.")
    negative_value: float = Field(-1.0, description="Token label for poor spans.")
    neutral_value: float = Field(0.0, description="Token label outside every span.")
