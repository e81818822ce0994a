"""How a model samples its answers: one shape, nested wherever a stage generates (``ppo.sampling``,
``evaluate.sampling``, ``policy_samples.sampling``).

The distribution is softmax(logits / temperature) truncated to the top_k tokens (0 = all), then to the top_p nucleus
(1 = all), renormalised; the math that applies it is ``t2g_core.rl.logprobs``. Temperature 0 is greedy decoding.
"""

from __future__ import annotations

from pydantic import Field

from t2g_core.config.base import StageConfig

RENAMED = {k: f"sampling.{k}" for k in ("temperature", "top_k", "top_p", "max_new_tokens")}


class Sampling(StageConfig):
    temperature: float = Field(1.0, ge=0, description="Softmax temperature; 0 = greedy decoding.")
    top_k: int = Field(
        0, ge=0, description="Sample from the k most likely tokens only, after the temperature (0 = all)."
    )
    top_p: float = Field(1.0, gt=0, le=1, description="Then from the smallest set reaching this probability (1 = all).")
    max_new_tokens: int = Field(48, ge=1, description="Most tokens generated per response.")

    @property
    def truncates(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def as_sampling(sampling: Sampling | float) -> Sampling:
    """A bare number is a temperature over the whole vocabulary."""
    return sampling if isinstance(sampling, Sampling) else Sampling(temperature=float(sampling))
