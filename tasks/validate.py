"""Validation tasks: draw the review sample, review it (ground truth, Prefect UI or offline page), gate and report.

Flow shape (what ``flows/`` calls)::

    sample = draw_review_sample(annotations, spans, feedback, settings, workspace)  # + offline page and sheet
    verdicts = auto_review(sample, annotations, spans, feedback)  # review="auto": ground truth
    # review="ui":      verdicts = flows.review.ui_review(sample, settings.validate_)  (pauses the flow)
    # review="offline": verdicts = import_verdicts(sample, path)  (or None: the report says the review is pending)
    report = validation_report(annotations, spans, feedback, sample, verdicts, settings, workspace)

``validation_report`` publishes the report (Prefect markdown + table artifacts, MLflow artifacts and metrics) and
raises :class:`ValidationGateError` naming every failed gate, so a bad batch stops the flow with a readable report.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.stages import ValidateSettings
from t2g_core.review import load_sample, load_verdicts
from t2g_core.review.models import check_verdicts
from t2g_core.stages import validate
from t2g_core.stages.refs import ArtifactRef, ReviewSampleRef, ValidationRef
from t2g_core.stages.validate import ValidationGateError
from tasks.caching import stage_task_options
from tasks.stage import stage

__all__ = [
    "ValidationGateError",
    "auto_review",
    "draw_review_sample",
    "import_verdicts",
    "validation_report",
]


@task(name="review-sample", **stage_task_options())
def draw_review_sample(
    annotations: ArtifactRef,
    spans: ArtifactRef,
    feedback: ArtifactRef | None,
    settings: ValidateSettings,
    workspace: WorkspaceConfig,
) -> ReviewSampleRef:
    """Stratified, seeded review sample, saved as ``sample.json`` with its offline page and sheet."""
    with stage(
        draw_review_sample,
        "review_sample",
        workspace,
        annotations=annotations,
        spans=spans,
        feedback=feedback,
        settings=settings,
    ) as ctx:
        return ctx.produced(validate.draw_sample(annotations, spans, feedback, settings, ctx))


@task(name="auto-review", **stage_task_options())
def auto_review(
    sample: ReviewSampleRef, annotations: ArtifactRef, spans: ArtifactRef, feedback: ArtifactRef
) -> dict | None:
    """The programmatic reviewer: judge the sample against feedback meta.gold_spans (None without ground truth)."""
    return validate.auto_review(sample, annotations, spans, feedback)


@task(name="import-verdicts", **stage_task_options())
def import_verdicts(sample: ReviewSampleRef, verdicts_path: str) -> dict:
    """Offline review: the verdict file downloaded from the review page (or the filled JSONL sheet), checked."""
    verdicts = load_verdicts(verdicts_path)
    check_verdicts(load_sample(sample.sample), verdicts, verdicts_path)
    return verdicts.model_dump(mode="json")


@task(name="validate", **stage_task_options())
def validation_report(
    annotations: ArtifactRef,
    spans: ArtifactRef,
    feedback: ArtifactRef | None,
    sample: ReviewSampleRef | None,
    verdicts: dict | None,
    settings: ValidateSettings,
    workspace: WorkspaceConfig,
) -> ValidationRef:
    """Checks + alignment -> report files -> Prefect and MLflow; raises ValidationGateError when a gate fails."""
    inputs = dict(annotations=annotations, spans=spans, feedback=feedback, sample=sample, verdicts=verdicts)
    with stage(validation_report, "validate", workspace, **inputs, settings=settings) as ctx:
        ref = ctx.produced(validate.check(annotations, spans, feedback, sample, verdicts, settings, ctx))
    publish_report(ref)
    validate.gate(ref)
    return ref


def publish_report(ref: ValidationRef) -> None:
    """The report as Prefect artifacts: the markdown report and the table of checks."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from t2g_core.validation.checks import CheckResult

    report = json.loads(Path(ref.json_path).read_text(encoding="utf-8"))
    create_markdown_artifact(
        key="validation-report",
        markdown=Path(ref.report).read_text(encoding="utf-8"),
        description=f"validation: {ref.status}",
    )
    checks = [CheckResult(**c) for c in report.get("checks", [])]
    rows = [{"check": c.name, "value": c.value, "threshold": c.threshold_text, "status": c.status} for c in checks]
    create_table_artifact(key="validation-checks", table=rows)
