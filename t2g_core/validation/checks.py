"""Automatic checks over a batch of annotations and spans, each against a configurable threshold.

Every check returns a :class:`CheckResult`: its value, the allowed range, ``status`` (pass / fail / skipped, never
a crash) and, when it fails, the worst items; each names the setting that bounds it and its likely cause
(:data:`GATES`). The checks, their settings and what they judge: docs/own-data.md, "The gates".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from t2g_core.alignment import micro_prf
from t2g_core.annotators.ground import NAME as GROUND
from t2g_core.annotators.ground import praise_only
from t2g_core.config.validate import ValidateConfig
from t2g_core.validation.batch import Batch, TokenOffsets, word_offsets
from t2g_core.validation.gold import item_gold_prf

# each gate: the setting that bounds it, and its likely cause when it fails (a check may say a sharper one)
GATES: dict[str, tuple[str, str]] = {
    "n_items": ("validate.min_items", "the feedback holds fewer items (data.n_items, data.limit or the file)"),
    "failure_rate": (
        "validate.max_parse_failure_rate",
        "the annotator failed on these items: their status and error say why",
    ),
    "unmatched_rate": (
        "validate.max_unmatched_rate",
        "the annotator quoted words the response does not contain (a paraphrase, a typo)",
    ),
    "no_span_rate": (
        "validate.max_no_span_rate",
        'critiques that find fault but name no words of the response ("The job is wrong.")',
    ),
    "minority_label_frac": ("validate.min_minority_label_frac", "one label is far rarer than the other"),
    "labelled_token_frac": (
        "validate.min_labelled_token_frac / validate.max_labelled_token_frac",
        "spans that cover too little of the responses (critiques that name few words) or nearly all of them",
    ),
    "span_f1": ("validate.min_span_f1", "spans that disagree with the ground truth (feedback meta.gold_spans)"),
    "failing_groups": (
        "validate.gate_breakdowns",
        "one annotator or task fails a check on its own (the report's breakdowns name it)",
    ),
    "human_alignment": (
        "validate.min_alignment",
        "the review disagrees with the annotator's spans or critiques (the review page shows where)",
    ),
}


@dataclass(frozen=True)
class CheckResult:
    name: str
    value: float
    min_allowed: float | None = None
    max_allowed: float | None = None
    status: str = "pass"  # pass | fail | skipped
    detail: str = ""
    worst: list[dict] = field(default_factory=list)
    cause: str = ""  # its likely cause when it fails (default: GATES)

    @property
    def setting(self) -> str:
        return GATES[self.name][0]

    @property
    def likely_cause(self) -> str:
        return self.cause or GATES[self.name][1]

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    @property
    def threshold_text(self) -> str:
        if self.min_allowed is not None and self.max_allowed is not None:
            return f"in [{self.min_allowed:g}, {self.max_allowed:g}]"
        if self.min_allowed is not None:
            return f">= {self.min_allowed:g}"
        if self.max_allowed is not None:
            return f"<= {self.max_allowed:g}"
        return "report only"


def judge(
    name: str,
    value: float,
    lo: float | None,
    hi: float | None,
    detail: str,
    worst: list[dict] | None = None,
    cause: str = "",
) -> CheckResult:
    """Compare ``value`` with its bounds; NaN (nothing to measure) is ``skipped``."""
    if value is None or math.isnan(value):
        return CheckResult(name, float("nan"), lo, hi, "skipped", detail)
    bad = (lo is not None and value < lo) or (hi is not None and value > hi)
    kept = list(worst or []) if bad else []
    return CheckResult(name, float(value), lo, hi, "fail" if bad else "pass", detail, kept, cause)


def _rate(num: int, den: int) -> float:
    return num / den if den else float("nan")


def check_n_items(b: Batch, cfg: ValidateConfig) -> CheckResult:
    n = len(b.items)
    return judge("n_items", n, cfg.min_items, None, f"{n} annotations, {b.items['id'].nunique()} items")


def check_failure_rate(b: Batch, cfg: ValidateConfig) -> CheckResult:
    bad = b.items[b.items["status"] != "ok"]
    counts = bad["status"].value_counts().to_dict()
    worst = [
        {"id": r.id, "annotator": r.annotator, "status": r.status, "error": str(r.error or "")[:120]}
        for r in bad.itertuples()
    ]
    detail = f"{len(bad)} of {len(b.items)} not ok" + (
        f" ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})" if counts else ""
    )
    rate = _rate(len(bad), len(b.items))
    return judge("failure_rate", rate, None, cfg.max_parse_failure_rate, detail, worst[: cfg.worst_items])


def check_unmatched_rate(b: Batch, cfg: ValidateConfig) -> CheckResult:
    um = b.spans[b.spans["match"] == "unmatched"]
    per_item = um.groupby("id")["text"].agg(["count", "first"]).sort_values("count", ascending=False, kind="stable")
    totals = b.spans.groupby("id").size()
    worst = [
        {"id": i, "unmatched": int(r["count"]), "spans": int(totals[i]), "example": r["first"][:80]}
        for i, r in per_item.iterrows()
    ]
    detail = f"{len(um)} of {len(b.spans)} spans unmatched"
    return judge(
        "unmatched_rate", _rate(len(um), len(b.spans)), None, cfg.max_unmatched_rate, detail, worst[: cfg.worst_items]
    )


def check_no_span_rate(b: Batch, cfg: ValidateConfig) -> CheckResult:
    ok = b.items[b.items["status"] == "ok"]
    # a critique that only praises ("Correct.") has nothing wrong to quote: not an item the annotator failed to place
    praise = ok["critique"].map(lambda c: isinstance(c, str) and praise_only(c)).astype(bool) & (ok["n_quoted"] == 0)
    judged = ok[~praise]
    empty = judged[judged["n_quoted"] == 0]
    worst = [{"id": r.id, "annotator": r.annotator, "critique": str(r.critique or "")[:80]} for r in empty.itertuples()]
    detail = f"{len(empty)} of {len(judged)} ok items quote no span" + (
        f" ({int(praise.sum())} more only praise)" if praise.any() else ""
    )
    return judge(
        "no_span_rate", _rate(len(empty), len(judged)), None, cfg.max_no_span_rate, detail, worst[: cfg.worst_items]
    )


RARE_LABEL = {  # the likely cause of too few spans of one label
    "positive": "the annotator marks little as good (critiques that praise without quoting, or one that only finds "
    "fault)",
    "negative": "the annotator marks little as wrong (responses nearly all right, or critiques that find fault "
    "without naming the words)",
}


def check_label_balance(b: Batch, cfg: ValidateConfig) -> CheckResult:
    counts = b.spans["label"].value_counts()
    pos, neg = int(counts.get("positive", 0)), int(counts.get("negative", 0))
    detail = f"{pos} positive, {neg} negative spans"
    rare = "negative" if pos >= neg else "positive"
    value = _rate(min(pos, neg), pos + neg)
    if len(b.items) and set(b.items["annotator"]) == {GROUND}:  # a good span only where a critique quotes its praise
        rare, value = "negative", _rate(neg, pos + neg)
        detail += "; annotate.annotator=ground: the negative share is judged" + (
            "" if pos else ", as no critique quotes a word it praises"
        )
    majority = "positive" if rare == "negative" else "negative"
    per_item = b.spans[b.spans["label"] == majority].groupby("id").size().sort_values(ascending=False, kind="stable")
    worst = [{"id": i, f"{majority}_spans": int(n)} for i, n in per_item.items()][: cfg.worst_items]
    return judge("minority_label_frac", value, cfg.min_minority_label_frac, None, detail, worst, RARE_LABEL[rare])


def labelled_tokens(response: str, spans: pd.DataFrame, token_offsets: TokenOffsets = word_offsets) -> tuple[int, int]:
    """(tokens overlapping a matched span, all tokens) of one response; tokens are words unless offsets are given."""
    ranges = [
        (int(s), int(e)) for s, e in zip(spans["start"], spans["end"], strict=True) if pd.notna(s) and pd.notna(e)
    ]
    tokens = [(ts, te) for ts, te in token_offsets(response) if te > ts]
    hit = sum(any(ts < e and s < te for s, e in ranges) for ts, te in tokens)
    return hit, len(tokens)


def check_labelled_tokens(b: Batch, cfg: ValidateConfig) -> CheckResult:
    name, lo, hi = "labelled_token_frac", cfg.min_labelled_token_frac, cfg.max_labelled_token_frac
    if not b.has_responses:
        return CheckResult(name, float("nan"), lo, hi, "skipped", "needs --feedback (responses)")
    ok = b.items[(b.items["status"] == "ok") & b.items["response"].notna()].drop_duplicates("id")
    by_id = dict(tuple(b.spans.groupby("id")))
    rows = []
    for r in ok.itertuples():
        hit, n = labelled_tokens(r.response, by_id.get(r.id, b.spans.iloc[:0]), b.token_offsets)
        rows.append({"id": r.id, "labelled": hit, "tokens": n, "frac": round(_rate(hit, n), 3) if n else 0.0})
    hit, tot = sum(r["labelled"] for r in rows), sum(r["tokens"] for r in rows)
    value = _rate(hit, tot)
    worst = sorted(rows, key=lambda r: r["frac"], reverse=not math.isnan(value) and value > hi)
    detail = f"{hit} of {tot} response {b.tokens_name} in a matched span"
    return judge(name, value, lo, hi, detail, worst[: cfg.worst_items])


def check_span_f1(b: Batch, cfg: ValidateConfig) -> CheckResult:
    if not b.has_gold:
        return CheckResult(
            "span_f1", float("nan"), cfg.min_span_f1, None, "skipped", "no ground truth (feedback meta.gold_spans)"
        )
    rows = item_gold_prf(b)
    prf = micro_prf(rows)
    p, r_, f1 = prf["precision"], prf["recall"], prf["f1"]
    worst = sorted(rows, key=lambda r: r["f1"])
    detail = f"precision {p:.3f}, recall {r_:.3f} over {len(rows)} items with ground truth"
    return judge("span_f1", f1, cfg.min_span_f1, None, detail, worst[: cfg.worst_items])


CHECKS: tuple[Callable[[Batch, ValidateConfig], CheckResult], ...] = (
    check_n_items,
    check_failure_rate,
    check_unmatched_rate,
    check_no_span_rate,
    check_label_balance,
    check_labelled_tokens,
    check_span_f1,
)


def run_checks(b: Batch, cfg: ValidateConfig) -> list[CheckResult]:
    return [check(b, cfg) for check in CHECKS]
