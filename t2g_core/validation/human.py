"""Human alignment: agreed judgements / all judgements, with a Wilson 95% interval, per task and overall.

A judgement is one span marked agree/disagree or one critique marked acceptable/not. The gate compares each task's
(or the sample's) Wilson lower bound, or point estimate, with ``min_alignment``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scipy.stats import binomtest

from t2g_core.config.validate import ValidateConfig
from t2g_core.review.models import ReviewSample, ReviewVerdicts, check_verdicts


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for k successes out of n; (0, 1) when n == 0."""
    if n == 0:
        return 0.0, 1.0
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Alignment:
    group: str
    agreed: int
    judged: int

    @property
    def point(self) -> float:
        return self.agreed / self.judged if self.judged else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.agreed, self.judged)


@dataclass(frozen=True)
class AlignmentResult:
    reviewer: str
    overall: Alignment
    per_task: list[Alignment]
    n_items: int
    expected_judgements: int
    gate_on: str
    threshold: float
    scope: str
    failed_groups: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failed_groups


def gate_value(a: Alignment, gate_on: str) -> float:
    return a.interval[0] if gate_on == "lower_bound" else a.point


def compute_alignment(
    sample: ReviewSample, verdicts: ReviewVerdicts, cfg: ValidateConfig, source: str = "verdicts"
) -> AlignmentResult:
    """Alignment of ``verdicts`` on ``sample`` and the gate outcome; raises VerdictError on foreign items."""
    check_verdicts(sample, verdicts, source)
    counts: dict[str, list[int]] = {}
    for v in verdicts.items:
        task = sample.item(v.id).task
        marks = [j.agree for j in v.spans] + ([v.critique_acceptable] if v.critique_acceptable is not None else [])
        c = counts.setdefault(task, [0, 0])
        c[0] += sum(marks)
        c[1] += len(marks)
    per_task = [Alignment(t, a, n) for t, (a, n) in sorted(counts.items())]
    overall = Alignment("all", sum(a.agreed for a in per_task), sum(a.judged for a in per_task))
    groups = per_task if cfg.alignment_gate_scope == "per_task" else [overall]
    failed = [a.group for a in groups if not a.judged or gate_value(a, cfg.alignment_gate_on) < cfg.min_alignment]
    if not groups:
        failed = ["all"]
    return AlignmentResult(
        reviewer=verdicts.reviewer,
        overall=overall,
        per_task=per_task,
        n_items=len(verdicts.items),
        expected_judgements=sample.n_judgements,
        gate_on=cfg.alignment_gate_on,
        threshold=cfg.min_alignment,
        scope=cfg.alignment_gate_scope,
        failed_groups=failed,
    )
