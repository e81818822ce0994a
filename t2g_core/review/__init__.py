"""Human review of span annotations: the sample and verdict models, and the offline HTML page / JSONL sheet."""

from t2g_core.review.models import (
    VERDICT_FIELDS,
    ItemVerdict,
    ReviewItem,
    ReviewSample,
    ReviewSpan,
    ReviewVerdicts,
    SpanJudgement,
    VerdictError,
    check_verdicts,
)
from t2g_core.review.offline import export_review, load_sample, load_verdicts, sheet_lines
from t2g_core.review.page import highlight, render_page

__all__ = [
    "VERDICT_FIELDS",
    "ItemVerdict",
    "ReviewItem",
    "ReviewSample",
    "ReviewSpan",
    "ReviewVerdicts",
    "SpanJudgement",
    "VerdictError",
    "check_verdicts",
    "export_review",
    "highlight",
    "load_sample",
    "load_verdicts",
    "render_page",
    "sheet_lines",
]
