"""The validation stage in four calls: checks -> sample -> review verdicts -> report files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd

from t2g_core.config.validate import ValidateConfig
from t2g_core.review.models import ReviewSample, ReviewVerdicts
from t2g_core.store import write_text_atomic
from t2g_core.validation.batch import Batch, GoldSpan
from t2g_core.validation.checks import CheckResult, judge, run_checks
from t2g_core.validation.human import compute_alignment
from t2g_core.validation.report import ValidationReport, plot_checks, render_markdown
from t2g_core.validation.sampling import draw_sample

BREAKDOWN_CHECKS = (
    "failure_rate",
    "unmatched_rate",
    "no_span_rate",
    "minority_label_frac",
    "labelled_token_frac",
    "span_f1",
)


def breakdown(b: Batch, cfg: ValidateConfig, column: str) -> pd.DataFrame:
    """Every check per value of ``column`` (annotator or task), with the checks that group would fail."""
    rows = []
    keys = b.items[column].fillna("unknown")
    for key in sorted(keys.unique()):
        sub = b.subset(keys == key)
        results = {c.name: c for c in run_checks(sub, cfg)}
        row = {column: key, "items": len(sub.items), "spans": len(sub.spans)}
        row |= {name: results[name].value for name in BREAKDOWN_CHECKS}
        row["failing"] = ", ".join(c.name for c in results.values() if c.failed) or "-"
        rows.append(row)
    return pd.DataFrame(rows, columns=[column, "items", "spans", *BREAKDOWN_CHECKS, "failing"])


def group_check(tables: dict[str, pd.DataFrame], cfg: ValidateConfig) -> CheckResult:
    """``failing_groups``: annotators and tasks that fail a check on their own (gated when cfg.gate_breakdowns)."""
    worst = [
        {"group": f"{column}={row[column]}", "items": row["items"], "failing": row["failing"]}
        for column, table in tables.items()
        if len(table) > 1  # a single group is the whole batch: its checks are the batch's own
        for row in table.to_dict("records")
        if row["failing"] != "-"
    ]
    detail = ", ".join(w["group"] for w in worst) or "none"
    return judge(
        "failing_groups",
        len(worst),
        None,
        0 if cfg.gate_breakdowns else None,
        detail,
        worst[: max(cfg.worst_items, 1) * 2],
    )


def check_batch(b: Batch, cfg: ValidateConfig) -> ValidationReport:
    """Run every automatic check, plus the per-annotator and per-task breakdowns."""
    tables = {"annotator": breakdown(b, cfg, "annotator"), "task": breakdown(b, cfg, "task")}
    checks = run_checks(b, cfg)
    if len(b.items):
        checks.append(group_check(tables, cfg))
    return ValidationReport(checks=checks, by_annotator=tables["annotator"], by_task=tables["task"])


def review_sample(b: Batch, cfg: ValidateConfig) -> ReviewSample:
    return draw_sample(b, cfg.sample_size, cfg.sample_seed)


def gold_by_id(b: Batch) -> dict[str, list[GoldSpan] | None]:
    return dict(zip(b.items["id"], b.items["gold"], strict=True))


def with_review(
    report: ValidationReport,
    sample: ReviewSample,
    verdicts: ReviewVerdicts,
    cfg: ValidateConfig,
    source: str = "verdicts",
) -> ValidationReport:
    """The report with the human-alignment result of ``verdicts`` (raises VerdictError on foreign items)."""
    return replace(report, alignment=compute_alignment(sample, verdicts, cfg, source), review_pending=False)


def write_report(report: ValidationReport, out_dir: str | Path) -> dict[str, Path]:
    """Write ``report.md``, ``report.json`` and ``checks.png`` into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = plot_checks(report, out / "checks.png")
    md = out / "report.md"
    write_text_atomic(md, render_markdown(report, chart=png.name))
    js = out / "report.json"
    write_text_atomic(js, json.dumps(report.to_dict(), indent=2, default=str))
    return {"markdown": md, "json": js, "chart": png}
