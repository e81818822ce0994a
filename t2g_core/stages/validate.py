"""Validation stage: draw the review sample, review it (ground truth here; the Prefect form or the offline page
elsewhere), then gate on the automatic checks and the human-alignment result and write the report."""

from __future__ import annotations

from pathlib import Path

from t2g_core.config.stages import ValidateSettings
from t2g_core.review import ReviewVerdicts, export_review, load_sample
from t2g_core.stages.context import GateFailed, StageContext
from t2g_core.stages.io import read
from t2g_core.stages.refs import ArtifactRef, ReviewSampleRef, ValidationRef


class ValidationGateError(GateFailed, RuntimeError):
    """The batch failed a validation gate; the message, one line, gives every failed gate with its setting and likely
    cause, and where the report is."""


def batch(annotations: ArtifactRef, spans: ArtifactRef, feedback: ArtifactRef | None, tokenizer: str | None = None):
    """The joined validation batch (token counts under ``tokenizer`` when given, else words)."""
    from t2g_core.validation import make_batch

    tok = None
    if tokenizer:
        from t2g_core.models.loading import load_tokenizer

        tok = load_tokenizer(tokenizer, padding_side=None)
    fb = read(feedback, "feedback") if feedback is not None else None
    return make_batch(read(annotations, "annotations"), read(spans, "spans"), fb, tokenizer=tok)


def draw_sample(
    annotations: ArtifactRef,
    spans: ArtifactRef,
    feedback: ArtifactRef | None,
    settings: ValidateSettings,
    ctx: StageContext,
) -> ReviewSampleRef:
    """The stratified, seeded review sample, written with its offline review page and sheet."""
    from t2g_core.validation import review_sample

    sample = review_sample(batch(annotations, spans, feedback), settings.validate_)
    paths = export_review(sample, ctx.out.folder("reports/validate/review"))
    return ReviewSampleRef(
        key=sample.key,
        n_items=len(sample.items),
        sample=str(paths["sample"]),
        page=str(paths["page"]),
        sheet=str(paths["sheet"]),
    )


def auto_review(
    sample: ReviewSampleRef, annotations: ArtifactRef, spans: ArtifactRef, feedback: ArtifactRef
) -> dict | None:
    """The programmatic reviewer: verdicts against feedback ``meta.gold_spans`` (None without ground truth)."""
    from t2g_core.validation import gold_by_id, ground_truth_review

    b = batch(annotations, spans, feedback)
    if not b.has_gold:
        return None
    return ground_truth_review(load_sample(sample.sample), gold_by_id(b)).model_dump(mode="json")


def check(
    annotations: ArtifactRef,
    spans: ArtifactRef,
    feedback: ArtifactRef | None,
    sample: ReviewSampleRef | None,
    verdicts: dict | None,
    settings: ValidateSettings,
    ctx: StageContext,
    *,
    tokenizer: str | None = None,
    verdict_source: str = "verdicts",
) -> ValidationRef:
    """Checks (+ human alignment from ``verdicts``) -> ``report.md``/``report.json``/``checks.png``; status is
    ``pass``, ``pending`` (review expected, verdicts not in yet) or ``fail`` (the caller stops the run)."""
    from dataclasses import replace

    from t2g_core.validation import check_batch, with_review, write_report

    cfg = settings.validate_
    report = replace(check_batch(batch(annotations, spans, feedback, tokenizer), cfg), review=cfg.review)
    if sample is not None and verdicts is not None:
        review = ReviewVerdicts.model_validate(verdicts)
        report = with_review(report, load_sample(sample.sample), review, cfg, verdict_source)
    elif cfg.review == "auto":
        report.notes.append("review auto: no ground truth (feedback meta.gold_spans), alignment not measured")
    else:
        report = replace(report, review_pending=cfg.review != "none")
    with ctx.own_folder("reports/validate") as out:
        paths = write_report(report, out)
    ctx.tracker.log_input(annotations, "annotations", "annotation")
    ctx.tracker.log_metrics({f"validate.{c.name}": c.value for c in report.checks if c.status != "skipped"})
    if report.alignment is not None:
        a = report.alignment.overall
        ctx.tracker.log_metrics({"validate.alignment": a.point, "validate.alignment_low": a.interval[0]})
    ctx.tracker.log_artifact(out, "validation")
    return ValidationRef(
        status=report.status, report=str(paths["markdown"]), chart=str(paths["chart"]), json_path=str(paths["json"])
    )


def gate(ref: ValidationRef) -> None:
    """Raise :class:`ValidationGateError` naming every failed gate when the report failed."""
    if ref.status != "fail":
        return
    import json

    failures = json.loads(Path(ref.json_path).read_text(encoding="utf-8")).get("failures", [])
    raise ValidationGateError(f"validation failed: {' | '.join(failures)} (report: {ref.report})")
