"""Where each stage group runs: inline in the orchestrating flow, or as a deployment on a work pool (e.g. a GPU
pool)."""

from __future__ import annotations

from pydantic import Field

from t2g_core.config.base import StageConfig


class PlacementConfig(StageConfig):
    annotate: str | None = Field(
        None, description="Work pool for annotation (None = run inline in the text2grad flow)."
    )
    align_and_validate: str | None = Field(None, description="Work pool for alignment and validation (None = inline).")
    train_reward_model: str | None = Field(
        None, description="Work pool for reward-model training, e.g. 't2g-gpu' (None = inline)."
    )
    train_policy: str | None = Field(None, description="Work pool for PPO, e.g. 't2g-gpu' (None = inline).")
    evaluate: str | None = Field(None, description="Work pool for policy evaluation (None = inline).")
