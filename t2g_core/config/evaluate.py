"""Policy evaluation: task metrics and paired comparisons (``docs/pipeline.md``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from t2g_core.config import sampling
from t2g_core.config.base import StageConfig
from t2g_core.config.data import Task
from t2g_core.config.sampling import Sampling

RENAMED = sampling.RENAMED | {"do_sample": "sampling.temperature (0: greedy decoding)"}


class EvaluateConfig(StageConfig):
    SECTION = "evaluate"
    RENAMED = RENAMED
    task: Task | None = Field(None, description="Task to evaluate (null: the task of the data's first item).")
    include_base_model: bool = Field(False, description="Also evaluate the untrained base model.")
    max_prompts: int = Field(128, ge=1, description="Held-out prompts evaluated per policy (the first N).")
    batch_size: int = Field(32, ge=1, description="Generation batch size.")
    sampling: Sampling = Field(
        default_factory=lambda: Sampling(max_new_tokens=64),
        description="How the policies answer (seeded sampling measures what PPO optimises; temperature 0: greedy).",
    )
    num_samples: int = Field(1, ge=1, description="Samples per prompt (pass@k needs k <= num_samples).")
    pass_k: tuple[int, ...] = Field((1,), description="k values reported as pass@k for code (each <= num_samples).")
    seed: int = Field(0, description="Generation seed (batch b uses seed + b).")
    code_timeout_s: float = Field(10.0, gt=0, description="Wall-clock limit for one code sample's tests.")
    bootstrap_samples: int = Field(2000, ge=100, description="Paired bootstrap resamples for confidence intervals.")
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence level of the bootstrap intervals.")
    reward_model_score: bool = Field(
        True, description="Also score every response with the reward model PPO learnt from (rm_reward, rm_poor_spans)."
    )
    judge_base_url: str | None = Field(
        None, description="OpenAI-compatible judge: each PPO response against the baseline's (a win rate)."
    )
    judge_model: str = Field("gpt-4o", description="Judge model name.")
    judge_timeout_s: float = Field(60.0, gt=0, description="Timeout of one judge request.")
    judge_concurrency: int = Field(4, ge=1, description="Judge requests in flight at once.")
    judge_api_key_env: str = Field(
        "OPENAI_API_KEY", description="Environment variable holding the judge's API key (never logged)."
    )
    judge_max_tokens: int = Field(256, ge=8, description="Most tokens of one judge reply.")

    @model_validator(mode="after")
    def _check_k(self) -> EvaluateConfig:
        too_big = [k for k in self.pass_k if k < 1 or k > self.num_samples]
        if too_big:
            raise ValueError(f"pass_k {too_big} must be between 1 and num_samples ({self.num_samples})")
        if self.num_samples > 1 and self.sampling.greedy:
            raise ValueError(f"num_samples {self.num_samples} needs sampling (sampling.temperature > 0)")
        return self
