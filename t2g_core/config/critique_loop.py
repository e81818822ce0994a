"""The on-policy critique loop of PPO: audit the reward model against the annotator on the policy's own rollouts, raise
the over-optimisation alarm, and refresh the reward model on the new labels (``t2g_core.ppo.critique_loop``;
``docs/ppo.md`` has the rules and the measurements behind the defaults)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from t2g_core.config.base import StageConfig, refuse_renamed

RENAMED = {
    "alarm_gain_check": "alarm_gain_margin (null: the floors alone decide)",
    "alarm_gain_noise": "alarm_gain_margin",
}


class CritiqueLoopConfig(StageConfig):
    enabled: bool | Literal["auto"] = Field(
        "auto",
        description="auto = on where it runs offline (the trained tagger, a reference or code critic); true = on; "
        "false = off.",
    )
    every: int = Field(5, ge=1, description="A round after every this many PPO steps (on the last step's rollouts).")
    first: int | None = Field(
        1, ge=1, description="The first round after this many steps, then every `every` (null: after `every`)."
    )
    budget: int = Field(16, ge=1, description="Rollouts annotated per round (at most the batch).")
    uncertain_share: float = Field(
        0.5, ge=0, le=1, description="Share of the budget given to the rollouts the reward model is least sure about."
    )
    alarm_f1_floor: float = Field(
        0.5, ge=0, le=1, description="The alarm fires when the reward model's span F1 against the annotator is below."
    )
    alarm_spans: Literal["poor", "all"] = Field(
        "poor", description="Which span F1 the floor reads: of the poor spans, or of all spans."
    )
    alarm_omission_floor: float | None = Field(
        None, ge=0, le=1, description="Also fire when the omission recall is below this (null: not checked)."
    )
    alarm_gain_margin: float | None = Field(
        0.0,
        ge=0,
        description="Fire only when the annotator's reward falls this many standard errors below the bar (null: "
        "floors only).",
    )
    on_alarm: Literal["rollback", "stop", "continue"] = Field(
        "rollback",
        description="rollback = restore the last passing round's policy and go on; stop = restore it and end; "
        "continue = only refresh.",
    )
    refresh_steps: int = Field(
        20, ge=0, description="Optimizer steps of each refresh of the tagger (0 = audit only, never refresh)."
    )
    refresh_learning_rate: float | None = Field(
        None, gt=0, description="Learning rate of a refresh (null: reward_model.learning_rate)."
    )
    replay_ratio: float = Field(
        1.0, ge=0, description="Examples of the reward model's own training data replayed per gathered label."
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return refuse_renamed("ppo.critique_loop", data, RENAMED)
