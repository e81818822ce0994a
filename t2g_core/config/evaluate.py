"""Policy evaluation: task metrics and paired comparisons."""

from __future__ import annotations

from pydantic import Field, model_validator

from t2g_core.config.base import StageConfig
from t2g_core.config.data import Task


class EvaluateConfig(StageConfig):
    task: Task | None = Field(None, description="Task to evaluate; None = the task of the data's first item.")
    include_base_model: bool = Field(
        False,
        description="In the pipeline, also evaluate the untrained base model (the baseline stays the policy before "
        "PPO).",
    )
    max_prompts: int = Field(128, ge=1, description="Prompts evaluated per policy (the first N items, in data order).")
    batch_size: int = Field(32, ge=1, description="Generation batch size.")
    max_new_tokens: int = Field(64, ge=1, description="Generation budget.")
    do_sample: bool = Field(
        True,
        description="Sample (seeded) instead of greedy decoding: the evaluation then measures the distribution PPO "
        "optimises. Greedy decoding hides errors a policy makes when sampled (the demo's warm-started policy states "
        "a fact wrongly about one time in three when sampled, rarely when greedy).",
    )
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (when do_sample).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass (when do_sample; 1 = no top-p).")
    top_k: int = Field(
        0,
        ge=0,
        description="Sample from the top_k most likely tokens only (when do_sample; 0 = all); applied after the "
        "temperature and before top_p, as in PPO's rollouts (ppo.top_k).",
    )
    num_samples: int = Field(
        1, ge=1, description="Samples per prompt (pass@k for code needs k <= num_samples; >1 needs do_sample)."
    )
    pass_k: tuple[int, ...] = Field((1,), description="k values reported as pass@k for code (each <= num_samples).")
    seed: int = Field(0, description="Generation seed (batch b uses seed + b).")
    code_timeout_s: float = Field(10.0, gt=0, description="Wall-clock limit for one code sample's tests.")
    bootstrap_samples: int = Field(2000, ge=100, description="Paired bootstrap resamples for confidence intervals.")
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence level of the bootstrap intervals.")
    reward_model_score: bool = Field(
        True,
        description="Also score every held-out response with the reward model PPO learnt from (when it learnt from "
        "one): rm_reward (good minus poor spans) and rm_poor_spans, compared with paired bootstrap intervals; they "
        "measure the policies without references (a policy can learn to please its reward model: a judge or "
        "references are the stronger evidence).",
    )
    judge_base_url: str | None = Field(
        None,
        description="OpenAI-compatible judge endpoint: each PPO response is judged against the policy before PPO's "
        "(both orders), giving a win rate with a bootstrap interval; it decides promotion where no reference-based "
        "metric was measured.",
    )
    judge_model: str = Field("gpt-4o", description="Judge model name.")
    judge_timeout_s: float = Field(60.0, gt=0, description="Timeout of one judge request.")
    judge_concurrency: int = Field(4, ge=1, description="Judge requests in flight at once.")
    judge_api_key_env: str = Field(
        "OPENAI_API_KEY",
        description="Environment variable holding the judge's API key (read by the task/CLI, never logged).",
    )
    judge_max_tokens: int = Field(
        256, ge=8, description="Most tokens of one judge reply (a verdict is a sentence and a word)."
    )

    @model_validator(mode="after")
    def _check_k(self) -> EvaluateConfig:
        too_big = [k for k in self.pass_k if k < 1 or k > self.num_samples]
        if too_big:
            raise ValueError(f"pass_k {too_big} must be between 1 and num_samples ({self.num_samples})")
        return self
