"""The pipeline's stages in order, and what refreshing one of them re-runs."""

from __future__ import annotations

from typing import Literal

# Names accepted by `t2g run --refresh` and the `refresh` flow parameter, in pipeline order.
Stage = Literal[
    "feedback", "models", "annotate", "align", "validate", "warmup", "policy_samples", "reward_model", "ppo", "evaluate"
]
STAGES: tuple[str, ...] = (
    "feedback",
    "models",
    "annotate",
    "align",
    "validate",
    "warmup",
    "policy_samples",
    "reward_model",
    "ppo",
    "evaluate",
)


def downstream(refresh: list[str] | None) -> set[str]:
    """Refreshing a stage re-runs it and every stage after it (their inputs are about to change)."""
    if not refresh:
        return set()
    unknown = set(refresh) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown stage(s) to refresh: {sorted(unknown)}; choose from {', '.join(STAGES)}")
    first = min(STAGES.index(s) for s in refresh)
    return set(STAGES[first:])
