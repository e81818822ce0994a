"""Self-distillation credit in PPO (``ppo.self_distillation``): a teacher that reads each rollout's critique scores the
rollout's tokens, and how far it disagrees with the student becomes token credit beside (or instead of) the span
rewards (``t2g_core.ppo.distillation``; ``docs/ppo.md``, "Self-distillation", has the equations)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from t2g_core.config.base import StageConfig

CRITIQUE = "{critique}"
TEMPLATE = "\n\nA reviewer's critique of an earlier answer: {critique}\nWrite the answer again, fixing it."


class SelfDistillation(StageConfig):
    mode: Literal["off", "add", "replace"] = Field(
        "off", description="add = the SD term beside the span rewards; replace = instead of spans, omissions, verdicts."
    )
    weight: float = Field(
        1.0, ge=0, description="w in r_t += w * g_t, g_t the teacher-minus-student log-prob of token t."
    )
    teacher: Literal["policy", "reference", "ema"] = Field(
        "policy", description="Who reads the critique: the rollout policy, the frozen reference, or the policy's EMA."
    )
    ema_rate: float = Field(
        0.05,
        gt=0,
        le=1,
        description="teacher=ema: each step the EMA adapter moves this share of the way to the policy's.",
    )
    placement: Literal["reward", "advantage"] = Field(
        "reward",
        description="reward = per-token rewards every estimator credits; advantage = token t's advantage only.",
    )
    top_k: int = Field(
        0, ge=0, description="0 = sampled-token credit; k = the reverse KL on the student's top k tokens and a tail."
    )
    clip: float = Field(1.0, gt=0, description="The teacher-minus-student log-prob g_t is clipped at this (nats).")
    judge: bool = Field(
        True, description="On a token the critic labelled, g_t may not oppose its label (false: as is)."
    )
    template: str = Field(
        TEMPLATE, description="Appended to the teacher's user turn; {critique} becomes the rollout's critique."
    )

    @property
    def on(self) -> bool:
        return self.mode != "off"

    @field_validator("template")
    @classmethod
    def _has_critique(cls, template: str) -> str:
        if CRITIQUE not in template:
            raise ValueError(f"ppo.self_distillation.template must contain {CRITIQUE}, where the critique goes")
        return template
