"""The on-policy critique loop of PPO: audit the reward model against the annotator on the policy's own rollouts, raise
the over-optimisation alarm, and refresh the reward model on the new labels (``t2g_core.ppo.critique_loop``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig


class CritiqueLoopConfig(StageConfig):
    enabled: bool | Literal["auto"] = Field(
        "auto",
        description="Every `every` PPO steps send `budget` of the step's rollouts to the pipeline's annotator "
        "(annotate section), log the reward model's agreement with it (critic_loop/f1, critic_loop/omission_recall), "
        "act on the alarm, and fine-tune the reward model (a tagger) on the new labels; the annotator's settings "
        "then reach PPO. auto = on where it runs offline and can refresh: PPO scores with the tagger the pipeline "
        "trained, the annotator is the reference or code critic, one process; true = on (an LLM annotator is then "
        "called during PPO), or a clear error where it cannot run; false = off.",
    )
    every: int = Field(5, ge=1, description="A round after every this many PPO steps (on the last step's rollouts).")
    first: int | None = Field(
        1,
        ge=1,
        description="The first round after this many PPO steps, then every `every` (None = after `every`). An early "
        "first round (1: on the warm start's own rollouts) refreshes the reward model before the fast early steps.",
    )
    budget: int = Field(
        16, ge=1, description="Rollouts annotated per round (at most the batch: the step's own rollouts are used)."
    )
    uncertain_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of the budget given to the rollouts the reward model is least sure about (its confidence: "
        "the probability of its least sure token's label); the rest are drawn at random (seeded by step).",
    )
    alarm_f1_floor: float = Field(
        0.5,
        ge=0,
        le=1,
        description="The over-optimisation alarm fires when the reward model's span F1 against the annotator on the "
        "round's rollouts (alarm_spans) falls below this.",
    )
    alarm_spans: Literal["poor", "all"] = Field(
        "poor",
        description="Which span F1 the floor reads: poor = of the poor spans (what the reward model must catch; an "
        "exploit is content the annotator calls poor and the reward model does not, a few spans among many good "
        "ones); all = of good and poor spans together (critic_loop/f1; both are logged).",
    )
    alarm_omission_floor: float | None = Field(
        None,
        ge=0,
        le=1,
        description="The alarm also fires when its omission recall against the annotator falls below this (None = "
        "not checked).",
    )
    alarm_gain_check: bool = Field(
        True,
        description="The alarm fires only when the annotator's mean reward on the round's rollouts is no higher than "
        "that of the policy it would restore (the last passing round's; before any, the warm start's, when a round "
        "after step 0 measured it): over-optimisation is the reward model followed while the annotator's judgement "
        "does not improve. A policy the annotator judges better, with a reward model that now disagrees, is kept and "
        "the reward model refreshed (measured: on the floor alone, rounds after a fast improvement rolled the policy "
        "back to the warm start). false = the floors alone decide.",
    )
    alarm_gain_noise: float = Field(
        0.0,
        ge=0,
        description="How many standard errors of the difference between the two means (the round's and the bar's, "
        "each over its annotated rollouts) the annotator's reward must fall below the bar before the gain check "
        "lets the alarm fire; 0 = any shortfall. A budget of 8 rollouts measures the mean with a standard error of "
        "a few reward points on a real model, so with 0 a round whose policy is no worse than the bar, only "
        "measured on other prompts, can roll back an improvement.",
    )
    on_alarm: Literal["rollback", "stop", "continue"] = Field(
        "rollback",
        description="rollback = restore the policy, critic, optimizers and KL controller of the last round that "
        "passed (the warm start before any), then refresh the reward model and go on; stop = restore that policy and "
        "end the run; continue = only refresh the reward model and go on.",
    )
    refresh_steps: int = Field(
        20,
        ge=0,
        description="Optimizer steps of each refresh: the tagger (its LoRA adapter and heads) is fine-tuned on every "
        "label the loop has gathered plus a replay of its training data; 0 = audit only, never refresh.",
    )
    refresh_learning_rate: float | None = Field(
        None, gt=0, description="Learning rate of a refresh (None = reward_model.learning_rate)."
    )
    replay_ratio: float = Field(
        1.0,
        ge=0,
        description="Examples of the reward model's own training data replayed per gathered label in a refresh, so "
        "it keeps what it knew.",
    )
