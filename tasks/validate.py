"""Validation tasks: draw the review sample, review it (ground truth, Prefect UI or offline page), gate and report.

Flow shape (what ``flows/`` calls)::

    sample = draw_review_sample(annotations, spans, feedback, cfg.validate_, cfg.workspace)  # + offline page and sheet
    verdicts = auto_review(sample, annotations, spans, feedback)  # review="auto": ground truth
    # review="ui":      verdicts = ui_review(sample, cfg.validate_.model_dump())  (in the flow body: it pauses the flow)
    # review="offline": verdicts = import_verdicts(sample, path)  (or None: the report says the review is pending)
    report = validation_report(annotations, spans, feedback, sample, verdicts, cfg.validate_, cfg.workspace)

``validation_report`` publishes the report (Prefect markdown + table artifacts, MLflow artifacts and metrics) and
raises :class:`ValidationGateError` naming every failed gate, so a bad batch stops the flow with a readable report.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.input import RunInput
from pydantic import create_model

from t2g_core.config import ValidateConfig, WorkspaceConfig
from t2g_core.review.models import VERDICT_FIELDS, ReviewSample, ReviewVerdicts, VerdictError, check_verdicts
from tasks import tracking
from tasks.caching import stage_task_options

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


class ValidationGateError(RuntimeError):
    """The batch failed a validation gate; the message lists every failed gate and where the report is."""


def _batch(annotations: dict, spans: dict, feedback: dict | None):
    from t2g_core.feedback import load_feedback
    from t2g_core.store import read_artifact
    from t2g_core.validation import make_batch

    fb = load_feedback(feedback["path"]) if feedback else None
    return make_batch(read_artifact(annotations["path"], "annotations"), read_artifact(spans["path"], "spans"), fb)


def _report_dir(workspace: WorkspaceConfig, *parts: str) -> Path:
    from t2g_core.workspace import Workspace

    return Workspace.at(workspace.root).reports.joinpath("validate", *parts)


@task(name="review-sample", **stage_task_options(600))
def draw_review_sample(
    annotations: dict, spans: dict, feedback: dict | None, cfg: ValidateConfig, workspace: WorkspaceConfig
) -> dict:
    """Stratified, seeded review sample, saved as ``sample.json`` with its offline page and sheet; returns paths."""
    from t2g_core.review import export_review
    from t2g_core.validation import review_sample

    sample = review_sample(_batch(annotations, spans, feedback), cfg)
    paths = export_review(sample, _report_dir(workspace, sample.key))
    return {"key": sample.key, "n_items": len(sample.items), **{k: str(p) for k, p in paths.items()}}


@task(name="auto-review", **stage_task_options(600))
def auto_review(sample: dict, annotations: dict, spans: dict, feedback: dict) -> dict | None:
    """The programmatic reviewer: judge the sample against feedback meta.gold_spans (None without ground truth)."""
    from t2g_core.review import load_sample
    from t2g_core.validation import gold_by_id, ground_truth_review

    b = _batch(annotations, spans, feedback)
    if not b.has_gold:
        return None
    return ground_truth_review(load_sample(sample["sample"]), gold_by_id(b)).model_dump(mode="json")


@task(name="import-verdicts", **stage_task_options(60))
def import_verdicts(sample: dict, verdicts_path: str) -> dict:
    """Offline review: the verdict file downloaded from the review page (or the filled JSONL sheet), checked."""
    from t2g_core.review import load_sample, load_verdicts

    verdicts = load_verdicts(verdicts_path)
    check_verdicts(load_sample(sample["sample"]), verdicts, verdicts_path)
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


def ui_review(sample: dict, cfg: dict, attempts: int = 3, poll_interval_s: float = 10.0) -> dict:
    """Publish the sample as a markdown artifact and pause the flow until a reviewer submits verdicts.

    Call it from a flow body (Prefect pauses flow runs, not task runs). The server rejects input that breaks the
    verdict schema; verdicts that name items or spans outside the sample re-open the form with the error shown,
    up to ``attempts`` times (pause keys ``span-review-1``, ``-2``, ...: Prefect skips a pause whose key already
    fired). Returns the verdicts as a dict.
    """
    from prefect.artifacts import create_markdown_artifact
    from prefect.flow_runs import pause_flow_run

    s = ReviewSample.model_validate(sample)
    c = ValidateConfig.model_validate(cfg)
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
    annotations: dict,
    spans: dict,
    feedback: dict | None,
    sample: dict | None,
    verdicts: dict | None,
    cfg: ValidateConfig,
    workspace: WorkspaceConfig,
) -> dict:
    """Checks + alignment -> report files -> Prefect and MLflow; raises ValidationGateError when a gate fails."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from t2g_core.review import load_sample
    from t2g_core.validation import check_batch, render_markdown, with_review, write_report

    report = check_batch(_batch(annotations, spans, feedback), cfg)
    if sample and verdicts:
        report = with_review(report, load_sample(sample["sample"]), ReviewVerdicts.model_validate(verdicts), cfg)
    elif cfg.review == "auto":
        report.notes.append("review auto: no ground truth (feedback meta.gold_spans), alignment not measured")
    else:
        report.review_pending = cfg.review != "none"
    out = _report_dir(workspace, sample["key"] if sample else "no-sample")
    paths = write_report(report, out)
    create_markdown_artifact(
        key="validation-report", markdown=render_markdown(report), description=f"validation: {report.status}"
    )
    create_table_artifact(
        key="validation-checks",
        table=[
            {"check": c.name, "value": c.value, "threshold": c.threshold_text, "status": c.status}
            for c in report.checks
        ],
    )
    with tracking.stage_run("validate", cfg, workspace):
        tracking.log_dataset(annotations, "annotations", "annotation")
        tracking.log_metrics({f"validate.{c.name}": c.value for c in report.checks if c.status != "skipped"})
        if report.alignment is not None:
            tracking.log_metrics(
                {
                    "validate.alignment": report.alignment.overall.point,
                    "validate.alignment_low": report.alignment.overall.interval[0],
                }
            )
        tracking.log_artifact(out, "validation")
    if report.status == "fail":
        raise ValidationGateError(
            f"validation failed ({paths['markdown']}):\n" + "\n".join(f"- {f}" for f in report.failures)
        )
    return {
        "status": report.status,
        "report": str(paths["markdown"]),
        "chart": str(paths["chart"]),
        "json": str(paths["json"]),
    }
