"""Validation tasks: draw the review sample, review it (ground truth, Prefect UI or offline page), gate and report.

Flow shape (what ``flows/`` calls)::

    sample = draw_review_sample(annotations, spans, feedback, settings, workspace)  # + offline page and sheet
    verdicts = auto_review(sample, annotations, spans, feedback)  # review="auto": ground truth
    # review="ui":      verdicts = ui_review(sample, settings.validate_)  (in the flow body: it pauses the flow)
    # review="offline": verdicts = import_verdicts(sample, path)  (or None: the report says the review is pending)
    report = validation_report(annotations, spans, feedback, sample, verdicts, settings, workspace)

``validation_report`` publishes the report (Prefect markdown + table artifacts, MLflow artifacts and metrics) and
raises :class:`ValidationGateError` naming every failed gate, so a bad batch stops the flow with a readable report.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import task
from prefect.input import RunInput
from pydantic import create_model

from t2g_core.config import ValidateConfig, WorkspaceConfig
from t2g_core.review.models import VERDICT_FIELDS, ReviewSample, ReviewVerdicts, VerdictError, check_verdicts
from t2g_core.stages.refs import ArtifactRef, ReviewSampleRef, ValidationRef
from t2g_core.stages.settings import ValidateSettings
from t2g_core.stages.validate import ValidationGateError
from tasks.caching import stage_task_options
from tasks.stage import stage

__all__ = [
    "ValidationGateError",
    "auto_review",
    "draw_review_sample",
    "import_verdicts",
    "ui_review",
    "validation_report",
]

# The Prefect form: the same field definitions as the core verdict model, so the server validates resume input
# with exactly the rules `t2g review import` applies.
ReviewInput = create_model(
    "ReviewInput",
    __base__=RunInput,
    __doc__="Verdicts on the review sample (see the `validation-review-sample` artifact).",
    **{name: (f.annotation, f) for name, f in VERDICT_FIELDS.items()},
)
PAUSE_KEY = "span-review"
SAMPLE_ARTIFACT = "validation-review-sample"


@task(name="review-sample", **stage_task_options(600))
def draw_review_sample(
    annotations: ArtifactRef,
    spans: ArtifactRef,
    feedback: ArtifactRef | None,
    settings: ValidateSettings,
    workspace: WorkspaceConfig,
) -> ReviewSampleRef:
    """Stratified, seeded review sample, saved as ``sample.json`` with its offline page and sheet."""
    from t2g_core.stages import validate

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


@task(name="auto-review", **stage_task_options(600))
def auto_review(
    sample: ReviewSampleRef, annotations: ArtifactRef, spans: ArtifactRef, feedback: ArtifactRef
) -> dict | None:
    """The programmatic reviewer: judge the sample against feedback meta.gold_spans (None without ground truth)."""
    from t2g_core.stages import validate

    return validate.auto_review(sample, annotations, spans, feedback)


@task(name="import-verdicts", **stage_task_options(60))
def import_verdicts(sample: ReviewSampleRef, verdicts_path: str) -> dict:
    """Offline review: the verdict file downloaded from the review page (or the filled JSONL sheet), checked."""
    from t2g_core.review import load_sample, load_verdicts

    verdicts = load_verdicts(verdicts_path)
    check_verdicts(load_sample(sample.sample), verdicts, verdicts_path)
    return verdicts.model_dump(mode="json")


def sample_markdown(sample: ReviewSample) -> str:
    """The sample as markdown: good spans as 🟩[k]**text**, poor spans as 🟥[k]**text**, then the critique."""
    parts = [
        f"# Span review, sample `{sample.key}`\n",
        f"{len(sample.items)} items, {sample.n_judgements} judgements. "
        "Resume the run with one verdict per item: for each span `agree` true/false, and `critique_acceptable`.\n",
    ]
    for it in sample.items:
        text, located = it.response, sorted((s for s in it.spans if s.start is not None), key=lambda s: -s.start)
        for s in located:  # right to left so earlier offsets stay valid
            mark = "🟩" if s.label == "positive" else "🟥"
            text = f"{text[: s.start]}{mark}[{s.span_index}]**{text[s.start : s.end]}**{text[s.end :]}"
        unmatched = [f"[{s.span_index}] {s.label} “{s.text}” (not found)" for s in it.spans if s.start is None]
        parts.append(f"## {it.id} ({it.stratum})\n\n**Prompt:** {it.prompt}\n\n**Response:** {text}\n")
        parts += [f"- {u}\n" for u in unmatched]
        parts.append(f"**Critique:** {it.critique if it.critique is not None else '(none)'}\n")
    return "\n".join(parts)


def _initial_items(sample: ReviewSample) -> list[dict]:
    return [
        {
            "id": it.id,
            "spans": [{"span_index": s.span_index, "agree": True, "text": s.text} for s in it.spans],
            "critique_acceptable": True if it.critique is not None else None,
            "comment": "",
        }
        for it in sample.items
    ]


def ui_review(
    sample: ReviewSampleRef | dict, cfg: ValidateConfig | dict, attempts: int = 3, poll_interval_s: float = 10.0
) -> dict:
    """Publish the sample as a markdown artifact and pause the flow until a reviewer submits verdicts.

    Call it from a flow body (Prefect pauses flow runs, not task runs). The server rejects input that breaks the
    verdict schema; verdicts that name items or spans outside the sample re-open the form with the error shown,
    up to ``attempts`` times (pause keys ``span-review-1``, ``-2``, ...: Prefect skips a pause whose key already
    fired). Returns the verdicts as a dict.
    """
    from prefect.artifacts import create_markdown_artifact
    from prefect.flow_runs import pause_flow_run

    from t2g_core.review import load_sample

    s = load_sample(sample.sample) if isinstance(sample, ReviewSampleRef) else ReviewSample.model_validate(sample)
    c = cfg if isinstance(cfg, ValidateConfig) else ValidateConfig.model_validate(cfg)
    create_markdown_artifact(key=SAMPLE_ARTIFACT, markdown=sample_markdown(s), description=f"review sample {s.key}")
    note = f"Review the sample in the `{SAMPLE_ARTIFACT}` artifact ({s.n_judgements} judgements)."
    for attempt in range(1, attempts + 1):
        form = ReviewInput.with_initial_data(
            description=note, sample_key=s.key, items=_initial_items(s)
        )  # reviewer stays required
        answer = pause_flow_run(
            wait_for_input=form, timeout=c.review_timeout_s, key=f"{PAUSE_KEY}-{attempt}", poll_interval=poll_interval_s
        )
        verdicts = ReviewVerdicts.model_validate(answer.model_dump())
        try:
            check_verdicts(s, verdicts, "review form")
            return verdicts.model_dump(mode="json")
        except VerdictError as exc:
            note = f"Please correct: {exc}"
    raise VerdictError(f"review form: no valid verdicts after {attempts} attempts ({note})")


@task(name="validate", **stage_task_options(600))
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
    from t2g_core.stages import validate

    with stage(
        validation_report,
        "validate",
        workspace,
        annotations=annotations,
        spans=spans,
        feedback=feedback,
        sample=sample,
        verdicts=verdicts,
        settings=settings,
    ) as ctx:
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
