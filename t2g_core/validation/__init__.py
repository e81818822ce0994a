"""Validation stage: automatic gates over annotations + spans and human-alignment review.

Typical use::

    b = make_batch(annotations_df, spans_df, feedback_df)      # feedback optional (responses, ground truth)
    report = check_batch(b, cfg)                                # every check, breakdowns, worst items
    sample = review_sample(b, cfg)                              # stratified, seeded
    report = with_review(report, sample, verdicts, cfg)         # verdicts from any review path
    write_report(report, out_dir)                               # report.md, report.json, checks.png
"""

from t2g_core.validation.batch import Batch, GoldSpan, make_batch, parse_gold
from t2g_core.validation.checks import CheckResult, run_checks
from t2g_core.validation.human import Alignment, AlignmentResult, compute_alignment, wilson_interval
from t2g_core.validation.report import ValidationReport, plot_checks, render_markdown
from t2g_core.validation.reviewer import ground_truth_review
from t2g_core.validation.sampling import draw_sample
from t2g_core.validation.stage import check_batch, gold_by_id, review_sample, with_review, write_report

__all__ = [
    "Alignment",
    "AlignmentResult",
    "Batch",
    "CheckResult",
    "GoldSpan",
    "ValidationReport",
    "check_batch",
    "compute_alignment",
    "draw_sample",
    "gold_by_id",
    "ground_truth_review",
    "make_batch",
    "parse_gold",
    "plot_checks",
    "render_markdown",
    "review_sample",
    "run_checks",
    "wilson_interval",
    "with_review",
    "write_report",
]
