"""The over-optimisation alarm: does the reward model now pay more than the annotator charges, on the same prompts and
random streams, than it did for the warm start? The paired statistic and its Bonferroni bound: docs/ppo.md,
"The over-optimisation alarm".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import t as student_t


@dataclass(frozen=True)
class GapTest:
    gap: float  # mean g: what the reward model pays beyond the annotator on this round's panel
    gap_start: float  # mean g0: the same for the warm start's responses
    t: float
    threshold: float

    @property
    def alarm(self) -> bool:
        return self.t > self.threshold

    def metrics(self) -> dict[str, float]:
        return {
            "gap": self.gap,
            "gap_start": self.gap_start,
            "gap_t": self.t,
            "gap_threshold": self.threshold,
            "alarm": float(self.alarm),
        }


def gap_test(gaps: Sequence[float], start_gaps: Sequence[float], rounds_planned: int, false_rate: float) -> GapTest:
    """The paired test of one round (``gaps`` and ``start_gaps`` per panel prompt, in the same order)."""
    d = [g - g0 for g, g0 in zip(gaps, start_gaps, strict=True)]
    n = len(d)
    threshold = float(student_t.ppf(1 - false_rate / max(rounds_planned, 1), max(n - 1, 1)))
    mean = statistics.fmean(d) if d else 0.0
    se = statistics.stdev(d) / math.sqrt(n) if n > 1 else 0.0
    t = mean / se if se > 0 else (math.copysign(math.inf, mean) if mean else 0.0)
    return GapTest(statistics.fmean(gaps) if gaps else 0.0, statistics.fmean(start_gaps) if d else 0.0, t, threshold)
