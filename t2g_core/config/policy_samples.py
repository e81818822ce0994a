"""The reward model's data from the policy itself (optional): the policy PPO starts from, sampled on training prompts
and labelled by the annotator, so the reward model has seen the text it will score before PPO asks it to
(``docs/reward_model.md``)."""

from __future__ import annotations

from pydantic import Field

from t2g_core.config import sampling
from t2g_core.config.base import StageConfig
from t2g_core.config.sampling import Sampling


class PolicySamplesConfig(StageConfig):
    SECTION = "policy_samples"
    RENAMED = sampling.RENAMED
    enabled: bool = Field(False, description="Sample the policy PPO starts from and train the reward model on it too.")
    prompts: int = Field(256, ge=1, description="Training prompts sampled, drawn at random by seed (never held out).")
    per_prompt: int = Field(1, ge=1, description="Responses sampled per prompt.")
    sampling: Sampling | None = Field(None, description="How they are sampled (null: as PPO's rollouts, ppo.sampling).")
    batch_size: int = Field(16, ge=1, description="Prompts per generation batch.")
    seed: int = Field(0, description="Seed of the prompts drawn and of the sampling (batch b uses seed + b).")
