"""Policy evaluation: task metrics and paired comparisons."""

from __future__ import annotations

from pydantic import Field

from t2g_core.config.base import StageConfig


class EvaluateConfig(StageConfig):
    max_prompts: int = Field(128, ge=1, description="Held-out prompts evaluated per policy.")
    batch_size: int = Field(32, ge=1, description="Generation batch size.")
    max_new_tokens: int = Field(64, ge=1, description="Generation budget.")
    do_sample: bool = Field(False, description="Sample instead of greedy decoding.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (when do_sample).")
    num_samples: int = Field(1, ge=1, description="Samples per prompt (pass@k for code needs k <= num_samples).")
    seed: int = Field(0, description="Generation seed.")
    bootstrap_samples: int = Field(2000, ge=100, description="Paired bootstrap resamples for confidence intervals.")
    judge_base_url: str | None = Field(None, description="OpenAI-compatible judge endpoint for pairwise win rates (qa).")
    judge_model: str = Field("gpt-4o", description="Judge model name.")
