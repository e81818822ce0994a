"""The on-policy critique loop of PPO: audit the reward model against the annotator on the policy's own rollouts, raise
the over-optimisation alarm, and refresh the reward model on the new labels (``t2g_core.critique_loop``;
``docs/ppo.md`` has the rules and the measurements behind the defaults)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig

GAP_TEST = "`the paired gap test on the panel (alarm_false_rate); the agreement is logged, not a floor`"
OLD_ALARM = "alarm_gain_check alarm_gain_noise alarm_gain_margin alarm_f1_floor alarm_spans alarm_omission_floor"
RENAMED = dict.fromkeys(OLD_ALARM.split(), GAP_TEST)


class CritiqueLoopConfig(StageConfig):
    SECTION = "ppo.critique_loop"
    RENAMED = RENAMED
    enabled: bool | Literal["auto"] = Field(
        "auto",
        description="auto = on where it runs offline (the trained tagger, a reference or code critic); true = on; "
        "false = off.",
    )
    every: int = Field(5, ge=1, description="A round after every this many PPO steps (on that step's rollouts).")
    first: int | None = Field(
        1, ge=1, description="The first round after this many steps, then every `every` (null: after `every`)."
    )
    budget: int = Field(16, ge=1, description="Rollouts annotated per round (at most the batch).")
    uncertain_share: float = Field(
        0.5, ge=0, le=1, description="Share of the budget given to the rollouts the reward model is least sure about."
    )
    panel: int = Field(
        16,
        ge=2,
        description="Training prompts the alarm samples every round with the same random streams (no refresh).",
    )
    alarm_false_rate: float = Field(
        0.05, gt=0, lt=1, description="Chance of any false alarm in a run where nothing changes (the gap test's alpha)."
    )
    on_alarm: Literal["rollback", "stop", "continue"] = Field(
        "rollback",
        description="rollback = restore the certified policy the annotator rated best; stop = restore it and end; "
        "continue = go on.",
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

    def rounds(self, steps: int) -> int:
        """Rounds a run of ``steps`` PPO steps plans: after step ``first`` (or ``every``), then every ``every``."""
        first = self.first or self.every
        return 0 if steps < first else 1 + (steps - first) // self.every
