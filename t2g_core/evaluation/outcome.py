"""The outcome of a pipeline run in a few words and figures: the primary metric before and after PPO, the
paired-bootstrap verdict, and whether the policy was promoted; one reading for the command line, the Prefect
summary, MLflow and the registered version's description.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from t2g_core.evaluation.results import LOWER_IS_BETTER
from t2g_core.evaluation.titles import is_percent, title

# the metric that decides promotion of a policy, per task: the first one the evaluation measured; without references
# (or the demo's facts), the judge's win rate against the policy before PPO, else the reward model's reward
PRIMARY_METRICS = {"summarization": ("fact_error", "rougeL"), "code": ("pass@1",), "qa": ("token_f1",)}
REFERENCE_FREE = ("judge_win_rate", "rm_reward")


@dataclass(frozen=True)
class Outcome:
    """``metric`` before (the baseline policy) and after (the trained one), the difference's interval, the verdict
    (``better``, ``worse``, ``no clear difference``, or ``not evaluated``)."""

    task: str
    metric: str | None
    before: float | None
    after: float | None
    low: float | None
    high: float | None
    verdict: str
    confidence: float = 0.95

    @property
    def lower_is_better(self) -> bool:
        return self.metric in LOWER_IS_BETTER

    @property
    def eligible(self) -> bool:
        """The policy may become the champion: the verdict on the primary metric is "better"."""
        return self.verdict == "better"

    def shown(self, value: float | None) -> str:
        """A value of the metric as the headline shows it (a rate in %)."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "–"
        return f"{100 * value:.1f}%" if self.metric and is_percent(self.metric) else f"{value:.3g}"

    def headline(self) -> str:
        """``fact error (%, lower is better): 38.4% -> 4.6%, better (95% CI of the difference [-36.9, -30.7])``."""
        if self.metric is None:
            return f"{self.task}: not evaluated"
        text = f"{title(self.metric)}: {self.shown(self.before)} -> {self.shown(self.after)}, {self.verdict}"
        if self.low is not None and self.high is not None:
            scale, unit = (100.0, " points") if is_percent(self.metric) else (1.0, "")
            level = round(100 * self.confidence)
            text += f" ({level}% CI of the difference [{scale * self.low:+.1f}, {scale * self.high:+.1f}]{unit})"
        return text

    def metrics(self) -> dict[str, float]:
        """Tracking metrics: ``<metric>_before``, ``<metric>_after``, ``<metric>_diff_low`` / ``_high``."""
        if self.metric is None:
            return {}
        name = self.metric.replace("@", "_")
        values = {"before": self.before, "after": self.after, "diff_low": self.low, "diff_high": self.high}
        return {f"{name}_{k}": float(v) for k, v in values.items() if v is not None}


def outcome(summary: Mapping[str, Any] | None, policy: str = "ppo") -> Outcome:
    """The outcome of ``policy`` against the summary's baseline on the first deciding metric the summary has: the
    task's primary metrics, else (without references) the judge's win rate against the baseline (before = 0.5, a
    policy against itself), else the reward model's reward."""
    if not summary:
        return Outcome("unknown", None, None, None, None, None, "not evaluated")
    task, baseline = str(summary.get("task")), summary.get("baseline")
    comparisons = {c["metric"]: c for c in summary.get("comparisons", []) if c["policy"] == policy}
    policies = summary.get("policies", {})
    confidence = float(summary.get("confidence", 0.95))
    for metric in (*PRIMARY_METRICS.get(task, ()), *REFERENCE_FREE):
        if metric == "judge_win_rate":
            judged = (summary.get("judge") or {}).get(policy) or {}
            if judged.get("judged"):
                low, high = judged.get("low"), judged.get("high")
                return Outcome(
                    task,
                    metric,
                    0.5,
                    float(judged["win_rate"]),
                    None if low is None else low - 0.5,
                    None if high is None else high - 0.5,
                    judged["verdict"],
                    confidence,
                )
            continue
        if metric in comparisons:
            c = comparisons[metric]
            return Outcome(
                task,
                metric,
                policies.get(baseline, {}).get("metrics", {}).get(metric),
                policies.get(policy, {}).get("metrics", {}).get(metric),
                c.get("low"),
                c.get("high"),
                c["verdict"],
                confidence,
            )
    return Outcome(task, None, None, None, None, None, "not evaluated")
