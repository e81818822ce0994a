"""The sampling distribution's three settings as one value: temperature, then top-k, then top-p, renormalised.

Plain Python (no torch), so a stage config can hand it out; the math that applies it is ``t2g_core.rl.logprobs``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sampling:
    """A sampling distribution: softmax(logits / temperature) truncated to the top_k tokens (0 = all), then to the
    top_p nucleus (1 = all), renormalised."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature {self.temperature}: must be > 0")
        if self.top_k < 0:
            raise ValueError(f"top_k {self.top_k}: must be >= 0 (0 = no top-k)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p {self.top_p}: must be in (0, 1] (1 = no top-p)")

    @property
    def truncates(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0


def as_sampling(sampling: Sampling | float) -> Sampling:
    """A bare number is a temperature over the whole vocabulary."""
    return sampling if isinstance(sampling, Sampling) else Sampling(float(sampling))
