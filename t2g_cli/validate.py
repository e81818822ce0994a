"""``t2g validate`` (the validation stage's gates and review) and ``t2g review export|import`` (offline review).

Exit codes: 0 every gate passed; 1 a gate failed (the report names every failed check and the worst items);
3 the offline review is pending (page exported, verdicts not imported yet); 2 bad input.
"""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, echo, fail, guard, pipeline_config

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


def _batch(annotations: Path, spans: Path, feedback: Path | None, tokenizer: str | None = None):
    from t2g_core.feedback import load_feedback
    from t2g_core.store import read_artifact
    from t2g_core.validation import make_batch

    fb = load_feedback(feedback) if feedback is not None else None
    tok = None
    if tokenizer:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
    return make_batch(read_artifact(annotations, "annotations"), read_artifact(spans, "spans"), fb, tokenizer=tok)


def _out_dir(out: Path | None, cfg) -> Path:
    return out if out is not None else Path(cfg.workspace.root) / "reports" / "validate"


def _ui_verdicts(sample, cfg):
    """Run the review as a Prefect flow that pauses for the verdict form; needs a reachable Prefect server."""
    from prefect import flow
    from prefect.settings import PREFECT_API_URL

    from t2g_core.review import ReviewVerdicts
    from tasks.validate import ui_review

    if not PREFECT_API_URL.value():
        fail(
            "--review ui needs a Prefect server the reviewer can reach: `make up` (or `prefect server start`), "
            "then set PREFECT_API_URL, e.g. http://127.0.0.1:4200/api"
        )
    review_flow = flow(name="t2g-review", log_prints=True)(ui_review)
    return ReviewVerdicts.model_validate(
        review_flow(sample.model_dump(mode="json"), cfg.validate_.model_dump(mode="json"))
    )


def _review(mode: str, b, sample, cfg, review_dir: Path, verdicts: Path | None):
    """Verdicts for ``sample`` from the chosen path, or None when the review is pending or skipped."""
    from t2g_core.review import export_review, load_verdicts
    from t2g_core.validation import gold_by_id, ground_truth_review

    if mode == "auto":
        return ground_truth_review(sample, gold_by_id(b)) if b.has_gold else None
    if mode == "offline":
        if verdicts is not None:
            return load_verdicts(verdicts)
        paths = export_review(sample, review_dir)
        echo(f"review page: {paths['page']}\nreview sheet: {paths['sheet']}")
        echo(f"then: t2g review import VERDICTS --sample {paths['sample']}")
        return None
    if mode == "ui":
        return _ui_verdicts(sample, cfg)
    return None


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
    from dataclasses import replace

    from t2g_core.review import VerdictError
    from t2g_core.validation import check_batch, review_sample, with_review

    cfg = pipeline_config(config, set_)
    mode = review or cfg.validate_.review
    if mode not in ("auto", "ui", "offline", "none"):
        fail(f"--review must be auto, ui, offline or none, not {mode!r}")
    if mode in ("ui", "offline") and feedback is None:
        fail(f"--review {mode} needs --feedback: the reviewer must see the prompts and responses")
    b = _batch(annotations, spans, feedback, tokenizer)
    report = replace(check_batch(b, cfg.validate_), review=mode)
    out_dir = _out_dir(out, cfg)
    if mode != "none":
        sample = review_sample(b, cfg.validate_)
        try:
            v = _review(mode, b, sample, cfg, out_dir / "review", verdicts)
            if v is not None:
                report = with_review(report, sample, v, cfg.validate_, str(verdicts or mode))
        except VerdictError as exc:
            fail(str(exc))
        if v is None and mode == "offline":
            report = replace(report, review_pending=True)
        elif v is None:
            report = replace(
                report, notes=[f"review {mode}: no ground truth (feedback meta.gold_spans), alignment not measured"]
            )
    _finish(report, out_dir)


def _finish(report, out_dir: Path) -> None:
    from t2g_core.validation import write_report

    paths = write_report(report, out_dir)
    for c in report.checks:
        echo(f"{c.status.upper():7} {c.name:20} {c.value:.4g}  ({c.threshold_text}) {c.detail}")
    if report.alignment is not None:
        a = report.alignment.overall
        lo, hi = a.interval
        echo(f"alignment {a.point:.3f} [{lo:.3f}, {hi:.3f}] from {a.judged} judgements by {report.alignment.reviewer}")
    echo(f"report: {paths['markdown']} (chart {paths['chart'].name})")
    if report.status == "fail":
        echo("FAILED gates:\n" + "\n".join(f"  - {f}" for f in report.failures))
        raise typer.Exit(EXIT_FAIL)
    if report.status == "pending":
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
    from t2g_core.review import export_review
    from t2g_core.validation import review_sample

    cfg = pipeline_config(config, set_)
    sample = review_sample(_batch(annotations, spans, feedback), cfg.validate_)
    paths = export_review(sample, out)
    echo(f"{len(sample.items)} items, {sample.n_judgements} judgements (sample {sample.key})")
    for name, p in paths.items():
        echo(f"{name}: {p}")


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
    from t2g_core.review import VerdictError, load_sample, load_verdicts
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
