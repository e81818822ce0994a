"""``t2g validate`` (the validation stage's gates and review) and ``t2g review export|import`` (offline review).

Exit codes: 0 every gate passed; 1 a gate failed (the report names every failed check and the worst items);
3 the offline review is pending (page exported, verdicts not imported yet); 2 bad input.
"""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, artifact, echo, fail, guard, pipeline_config, stage_context
from t2g_core.config.stages import ValidateSettings
from t2g_core.review import VerdictError, check_verdicts, load_sample, load_verdicts
from t2g_core.stages import validate as stage

review_app = typer.Typer(
    help="Offline human-alignment review: export an HTML page + JSONL sheet, import verdicts.", no_args_is_help=True
)

EXIT_FAIL, EXIT_PENDING = 1, 3
ReviewOpt = typer.Option(
    None,
    "--review",
    "-r",
    help="auto (ground-truth reviewer) | ui (Prefect pause form) | offline (HTML page) | none; default from config.",
)


def _ui_verdicts(sample, settings):
    """Run the review as a Prefect flow that pauses for the verdict form; needs a reachable Prefect server."""
    from prefect import flow
    from prefect.settings import PREFECT_API_URL

    from flows.review import ui_review

    if not PREFECT_API_URL.value():
        fail(
            "--review ui needs a Prefect server the reviewer can reach: `make up` (or `prefect server start`), "
            "then set PREFECT_API_URL, e.g. http://127.0.0.1:4200/api"
        )
    review_flow = flow(name="t2g-review", log_prints=True)(ui_review)
    return review_flow(sample, settings.validate_)


def _verdicts(mode: str, sample, inputs: tuple, settings, verdicts: Path | None):
    """Verdicts on ``sample`` from the chosen review, or None when the review is pending or skipped."""
    if mode == "auto":
        return stage.auto_review(sample, *inputs)
    if mode == "offline":
        if verdicts is None:
            echo(f"review page: {sample.page}\nreview sheet: {sample.sheet}")
            echo(f"then: t2g review import VERDICTS --sample {sample.sample}")
            return None
        loaded = load_verdicts(verdicts)
        check_verdicts(load_sample(sample.sample), loaded, str(verdicts))
        return loaded.model_dump(mode="json")
    return _ui_verdicts(sample, settings) if mode == "ui" else None


@guard
def validate(
    annotations: Path = typer.Argument(..., help="annotations artifact folder or Parquet file."),
    spans: Path = typer.Argument(..., help="spans artifact folder or Parquet file."),
    feedback: Path = typer.Option(
        None, "--feedback", "-f", help="Feedback (responses, prompts, meta.gold_spans ground truth)."
    ),
    review: str = ReviewOpt,
    verdicts: Path = typer.Option(
        None, "--verdicts", help="Offline review: verdict JSON or filled JSONL sheet to score."
    ),
    tokenizer: str = typer.Option(
        None, "--tokenizer", help="Tokenizer folder: count its tokens (not words) for labelled_token_frac."
    ),
    out: Path = typer.Option(None, "--out", "-o", help="Report folder (default <workspace>/reports/validate)."),
    config: Path = ConfigOpt,
    set_: list[str] = SetOpt,
) -> None:
    """Check annotations + spans against the gates, run the human-alignment review, write the report."""
    cfg = pipeline_config(config, [*(set_ or []), *([f"validate.review={review}"] if review else [])])
    settings = ValidateSettings.from_pipeline(cfg)
    mode = settings.validate_.review
    if mode in ("ui", "offline") and feedback is None:
        fail(f"--review {mode} needs --feedback: the reviewer must see the prompts and responses")
    inputs = (
        artifact(annotations, "annotations"),
        artifact(spans, "spans"),
        artifact(feedback, "feedback") if feedback is not None else None,
    )
    out_dir = out if out is not None else Path(cfg.workspace.root) / "reports" / "validate"
    params = {"annotations": inputs[0], "spans": inputs[1], "feedback": inputs[2], "settings": settings}
    sample = found = None
    try:
        if mode != "none":
            sample = stage.draw_sample(
                *inputs, settings, stage_context("validate", cfg.workspace.root, params, out_dir / "review")
            )
            found = _verdicts(mode, sample, inputs, settings, verdicts)
        ctx = stage_context("validate", cfg.workspace.root, params, out_dir)
        ref = stage.check(
            *inputs, sample, found, settings, ctx, tokenizer=tokenizer, verdict_source=str(verdicts or mode)
        )
    except VerdictError as exc:
        fail(str(exc))
    _finish(ref)


def _finish(ref) -> None:
    import json

    from t2g_core.validation.checks import CheckResult

    report = json.loads(Path(ref.json_path).read_text(encoding="utf-8"))
    for c in (CheckResult(**c) for c in report["checks"]):
        value = "-" if c.value is None else f"{c.value:.4g}"  # a skipped check measured nothing
        echo(f"{c.status.upper():7} {c.name:20} {value}  ({c.threshold_text}) {c.detail}")
    alignment = report.get("alignment")
    if alignment is not None:
        a = alignment["groups"][-1]  # the whole sample
        echo(
            f"alignment {a['alignment']:.3f} [{a['ci95_low']:.3f}, {a['ci95_high']:.3f}] from {a['judged']} "
            f"judgements by {alignment['reviewer']}"
        )
    echo(f"report: {ref.report} (chart {Path(ref.chart).name})")
    if ref.status == "fail":
        echo("FAILED gates:\n" + "\n".join(f"  - {f}" for f in report["failures"]))
        raise typer.Exit(EXIT_FAIL)
    if ref.status == "pending":
        echo("review pending: gates not decided until the verdicts are imported")
        raise typer.Exit(EXIT_PENDING)
    echo("all gates passed")


@review_app.command("export")
@guard
def review_export(
    annotations: Path = typer.Argument(..., help="annotations artifact folder or Parquet file."),
    spans: Path = typer.Argument(..., help="spans artifact folder or Parquet file."),
    feedback: Path = typer.Option(..., "--feedback", "-f", help="Feedback (prompts and responses to show)."),
    out: Path = typer.Option(
        Path("review"), "--out", "-o", help="Folder for review.html, sheet.jsonl and sample.json."
    ),
    config: Path = ConfigOpt,
    set_: list[str] = SetOpt,
) -> None:
    """Draw the stratified review sample and write the HTML review page and the JSONL sheet."""
    cfg = pipeline_config(config, set_)
    settings = ValidateSettings.from_pipeline(cfg)
    inputs = (artifact(annotations, "annotations"), artifact(spans, "spans"), artifact(feedback, "feedback"))
    params = {"annotations": inputs[0], "spans": inputs[1], "feedback": inputs[2], "settings": settings}
    sample = stage.draw_sample(*inputs, settings, stage_context("validate", cfg.workspace.root, params, out))
    echo(f"{sample.n_items} items (sample {sample.key})")
    for name in ("sample", "page", "sheet"):
        echo(f"{name}: {getattr(sample, name)}")


@review_app.command("import")
@guard
def review_import(
    verdicts: Path = typer.Argument(..., help="Verdict JSON downloaded from the page, or the filled JSONL sheet."),
    sample: Path = typer.Option(Path("review"), "--sample", help="sample.json (or the export folder)."),
    reviewer: str = typer.Option("offline", help="Reviewer name for a JSONL sheet."),
    config: Path = ConfigOpt,
    set_: list[str] = SetOpt,
) -> None:
    """Read verdicts back, compute human alignment (Wilson 95% interval per task) and apply the gate."""
    from t2g_core.validation import compute_alignment

    cfg = pipeline_config(config, set_)
    try:
        s = load_sample(sample)
        al = compute_alignment(s, load_verdicts(verdicts, reviewer), cfg.validate_, str(verdicts))
    except (VerdictError, FileNotFoundError) as exc:
        fail(str(exc))
    for a in [*al.per_task, al.overall]:
        lo, hi = a.interval
        echo(f"{a.group:15} {a.agreed}/{a.judged} = {a.point:.3f}  95% CI [{lo:.3f}, {hi:.3f}]")
    echo(
        f"{al.overall.judged} of {al.expected_judgements} judgements made; gate ({al.gate_on} >= {al.threshold:g}): "
        + ("FAIL " + ", ".join(al.failed_groups) if al.failed_groups else "pass")
    )
    if al.failed_groups:
        raise typer.Exit(EXIT_FAIL)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.add_typer(review_app, name="review")
