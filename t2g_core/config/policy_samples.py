"""The reward model's data from the policy itself (optional): the policy PPO starts from, sampled on training prompts
and labelled by the annotator, so the reward model has seen the text it will score before PPO asks it to.

A reward model trained only on the dataset's responses meets, from PPO's first step, text it never saw: a warmed-up
pretrained policy words, orders and repeats things its own way (on SmolLM2 the tagger trained on the dataset's
summaries agreed with the annotator on none of the warm start's flawed spans). The critique loop labels a few of
PPO's rollouts a round; this stage labels the warm start's before PPO begins.
"""

from __future__ import annotations

from pydantic import Field

from t2g_core.config.base import StageConfig


class PolicySamplesConfig(StageConfig):
    enabled: bool = Field(
        False,
        description="Sample the policy PPO starts from (the warmed-up one when warmup.enabled) on training prompts, "
        "have the annotator label each response, and train the reward model on them with the dataset's items.",
    )
    prompts: int = Field(
        256,
        ge=1,
        description="Training prompts sampled, drawn at random (seed); never a prompt the holdout section holds "
        "out, and the reward model leaves out those in its own validation split (its held-out figures stay on the "
        "dataset's items).",
    )
    per_prompt: int = Field(1, ge=1, description="Responses sampled per prompt.")
    max_new_tokens: int = Field(48, ge=1, description="Response budget (as PPO's rollouts: ppo.max_new_tokens).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (as PPO's rollouts: ppo.temperature).")
    top_k: int = Field(0, ge=0, description="Top-k truncation, 0 = none (as PPO's rollouts: ppo.top_k).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus mass, 1 = none (as PPO's rollouts: ppo.top_p).")
    batch_size: int = Field(16, ge=1, description="Prompts per generation batch.")
    seed: int = Field(0, description="Seed of the prompts drawn and of the sampling (batch b uses seed + b).")
