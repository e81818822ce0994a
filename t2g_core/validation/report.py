"""The validation report: checks, worst items, breakdowns and human alignment, as markdown, JSON and a bar chart."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from t2g_core.validation.checks import GATES, CheckResult
from t2g_core.validation.human import AlignmentResult, gate_value

COUNT_CHECKS = ("n_items", "failing_groups")  # counts, not fractions: in the table, not on the 0-1 chart


@dataclass
class ValidationReport:
    checks: list[CheckResult]
    by_annotator: pd.DataFrame
    by_task: pd.DataFrame
    alignment: AlignmentResult | None = None
    review: str = "none"  # auto | ui | offline | none
    review_pending: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if c.failed]

    @property
    def failures(self) -> list[str]:
        """One line per failed gate with its setting and likely cause, e.g. ``unmatched_rate 0.31 (must be <= 0.05:
        validate.max_unmatched_rate): 31 of 100 spans unmatched; likely cause: ...``."""
        out = [
            f"{c.name} {c.value:.4g} (must be {c.threshold_text}: {c.setting}): {c.detail}; likely cause: "
            f"{c.likely_cause}"
            for c in self.failed_checks
        ]
        if self.alignment is not None:
            al = self.alignment
            values = {a.group: gate_value(a, al.gate_on) for a in [*al.per_task, al.overall]}
            setting, cause = GATES["human_alignment"]
            for group in al.failed_groups:
                out.append(
                    f"human_alignment[{group}] {values.get(group, float('nan')):.3f} ({al.gate_on}) below "
                    f"{al.threshold:g} ({setting}); likely cause: {cause}"
                )
        return out

    @property
    def status(self) -> str:
        if self.failures:
            return "fail"
        return "pending" if self.review_pending else "pass"

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict:
        al = None
        if self.alignment is not None:
            al = {
                **asdict(self.alignment),
                "groups": [_alignment_row(a) for a in [*self.alignment.per_task, self.alignment.overall]],
            }
        return {
            "status": self.status,
            "failures": self.failures,
            "checks": [_no_nan(asdict(c)) for c in self.checks],
            "by_annotator": [_no_nan(r) for r in self.by_annotator.to_dict("records")],
            "by_task": [_no_nan(r) for r in self.by_task.to_dict("records")],
            "alignment": al,
            "review": self.review,
            "notes": self.notes,
        }


def _no_nan(row: dict) -> dict:
    """NaN (nothing to measure) as null, so report.json is strict JSON."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return "n/a" if math.isnan(v) else f"{v:.4g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return "_(none)_\n"
    cols = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _alignment_row(a) -> dict:
    lo, hi = a.interval
    return dict(task=a.group, agreed=a.agreed, judged=a.judged, alignment=a.point, ci95_low=lo, ci95_high=hi)


def _alignment_md(al: AlignmentResult) -> str:
    gated = {a.group for a in al.per_task} if al.scope == "per_task" else {"all"}

    def gate(group: str) -> str:
        return "FAIL" if group in al.failed_groups else ("pass" if group in gated else "-")

    rows = [{**_alignment_row(a), "gate": gate(a.group)} for a in [*al.per_task, al.overall]]
    head = (
        f"## Human alignment (reviewer: {al.reviewer})\n\n{al.n_items} items reviewed, "
        f"{al.overall.judged} of {al.expected_judgements} judgements made. Gate: {al.gate_on} of the Wilson 95% "
        f"interval >= {al.threshold:g}, {al.scope.replace('_', ' ')}.\n\n"
    )
    return head + markdown_table(rows)


def render_markdown(report: ValidationReport, chart: str | None = None) -> str:
    parts = [f"# Validation report: {report.status.upper()}\n"]
    if report.failures:
        parts.append("Failed gates:\n\n" + "\n".join(f"- {f}" for f in report.failures) + "\n")
    parts += [f"> {n}\n" for n in report.notes]
    rows = [
        dict(check=c.name, value=c.value, threshold=c.threshold_text, status=c.status.upper(), detail=c.detail)
        for c in report.checks
    ]
    parts.append("## Checks\n\n" + markdown_table(rows))
    if chart:
        parts.append(f"![checks vs thresholds]({chart})\n")
    for c in report.failed_checks:
        if c.worst:
            parts.append(f"### Worst items: {c.name}\n\n" + markdown_table(c.worst))
    if report.alignment is not None:
        parts.append(_alignment_md(report.alignment))
    elif report.review_pending:
        parts.append("## Human alignment\n\nReview pending: import the verdicts with `t2g review import`.\n")
    parts.append("## By annotator\n\n" + markdown_table(report.by_annotator.to_dict("records")))
    parts.append("## By task\n\n" + markdown_table(report.by_task.to_dict("records")))
    return "\n".join(parts)


def plot_checks(report: ValidationReport, path: str | Path) -> Path:
    """Bar chart of every fraction-valued check (and the alignment gate value) against its thresholds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [
        (c.name, c.value, c.min_allowed, c.max_allowed, c.status) for c in report.checks if c.name not in COUNT_CHECKS
    ]
    if report.alignment is not None:
        al = report.alignment
        groups = al.per_task if al.scope == "per_task" and al.per_task else [al.overall]
        value = min(gate_value(a, al.gate_on) for a in groups)
        bars.append((f"alignment ({al.gate_on})", value, al.threshold, None, "fail" if al.failed_groups else "pass"))
    colors = {"pass": "#2e7d32", "fail": "#c62828", "skipped": "#9e9e9e"}
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(bars) + 1.2))
    for y, (_name, value, lo, hi, status) in enumerate(bars):
        v = 0.0 if math.isnan(value) else value
        ax.barh(y, v, color=colors[status], height=0.6)
        ax.plot([v], [y], "o", color=colors[status], ms=6)  # visible even when the value is 0
        ax.text(min(v, 0.93) + 0.01, y, "skipped" if math.isnan(value) else f"{value:.3f}", va="center", fontsize=8)
        for bound, marker in ((lo, "min"), (hi, "max")):
            if bound is not None:
                ax.plot([bound, bound], [y - 0.4, y + 0.4], color="black", lw=2)
                ax.text(bound, y + 0.42, marker, fontsize=6, ha="center")
    ax.set_yticks(range(len(bars)), [f"{b[0]} ({b[4].upper()})" for b in bars])
    for tick, b in zip(ax.get_yticklabels(), bars, strict=True):
        tick.set_color(colors[b[4]])
    ax.set_xlim(0, 1.05)
    ax.invert_yaxis()
    ax.set_xlabel("value (black ticks: thresholds)")
    ax.set_title(f"validation checks: {report.status.upper()}")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
