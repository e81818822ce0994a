"""``t2g rm``: build the reward model's data, train it, evaluate it and score responses with it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import typer

from t2g_cli._common import (
    ConfigOpt,
    SetOpt,
    artifact,
    echo,
    fail,
    guard,
    join_processes,
    pipeline_config,
    read_extra,
    stage_context,
)
from t2g_core.config.stages import RewardModelSettings
from t2g_core.feedback import load_feedback
from t2g_core.progress import TqdmProgress
from t2g_core.stages import reward_model as stage

rm_app = typer.Typer(
    help="Reward model (reward_model.kind: tagger or generative): build-data, train, eval, score.", no_args_is_help=True
)

BaseOpt = typer.Option(
    ..., "--base", "-b", help="Base model folder or Hugging Face id (its tokenizer renders the prompts)."
)
SCORED_FIELDS = ("status", "critique", "good_spans", "poor_spans", "error", "raw")  # per response, after its id


def _exists(path: Path) -> Path:
    if not path.exists():
        fail(f"{path}: no such file or folder")
    return path


def _print_metrics(metrics: dict[str, float]) -> None:
    for key, value in sorted(metrics.items()):
        echo(f"  {key:<28} {value:.4g}")


@rm_app.command("build-data")
@guard
def build_data(
    feedback: Path = typer.Argument(..., help="Feedback file or artifact folder."),
    annotations: Path = typer.Argument(..., help="Annotations artifact folder or Parquet file (validated)."),
    base: str = BaseOpt,
    output: Path = typer.Option(
        ..., "--output", "-o", help="rm_data Parquet file (.parquet) or a folder for an artifact."
    ),
    spans: Path | None = typer.Option(None, help="Spans artifact from `t2g align` (else spans are aligned here)."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Rows (id, split, rm_prompt, rm_target) with the shared prompt builder and a deterministic split."""
    pipe = pipeline_config(config, set_)
    settings = RewardModelSettings.from_pipeline(pipe)
    fb, ann = artifact(feedback, "feedback"), artifact(annotations, "annotations")
    sp = artifact(spans, "spans") if spans else None
    params = {"feedback": fb, "annotations": ann, "spans": sp, "base": base, "settings": settings}
    ref = stage.build_data(
        fb, ann, sp, base, settings, stage_context("reward_model", pipe.workspace.root, params, output)
    )
    stats = read_extra(ref)["stats"]
    echo(f"rm_data: {ref.path} ({int(stats['n_train'])} train, {int(stats['n_validation'])} validation)")
    _print_metrics(stats)


@rm_app.command("train")
@guard
def train(
    rm_data: Path = typer.Argument(..., help="rm_data artifact folder or Parquet file."),
    base: str = BaseOpt,
    out: Path = typer.Option(
        ..., "--out", "-o", help="Run folder: checkpoints/ and the final adapter/ (generative) or tagger/."
    ),
    feedback: Path | None = typer.Option(
        None, "--feedback", help="Feedback the rm_data was built from (a tagger reads its responses there)."
    ),
    resume: bool = typer.Option(True, help="Resume from the last checkpoint in --out (or skip a finished run)."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Fine-tune the base on the train split (generative: loss on the target only; tagger: per-token labels);
    checkpoints every save_steps."""
    pipe = pipeline_config(config, set_)
    join_processes()  # under accelerate launch: every process trains, the first writes
    settings = RewardModelSettings.from_pipeline(pipe)
    data = artifact(rm_data, "rm_data")
    fb = artifact(feedback, "feedback") if feedback else None
    if settings.reward_model.kind == "tagger" and fb is None:
        fail("reward_model.kind=tagger: pass --feedback FILE (the feedback the rm_data was built from)")
    ctx = stage_context(
        "reward_model", pipe.workspace.root, {"rm_data": data, "base": base, "settings": settings}, out, progress=False
    )
    result = stage.fit(data, base, settings, replace(ctx, force=not resume, on_progress=TqdmProgress()), fb)
    how = f"resumed from {result.resumed_from}" if result.resumed_from else "from scratch"
    took = f"{result.global_step} steps, {how}, {result.train_seconds:.1f} s"
    echo(f"{settings.reward_model.kind}: {result.adapter_dir} ({took})")


@rm_app.command("eval")
@guard
def evaluate(
    rm_data: Path = typer.Argument(..., help="rm_data artifact folder or Parquet file."),
    feedback: Path = typer.Argument(
        ..., help="Feedback the rm_data was built from (for the responses and demo truth)."
    ),
    model: Path = typer.Option(
        ..., "--model", "-m", help="Tagger or adapter folder (from `t2g rm train`) or a full model folder."
    ),
    split: str = typer.Option("validation", help="Which split of rm_data to evaluate."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Folder for metrics.json, report.md and items.parquet."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """JSON-valid rate, span/token P/R/F1 vs gold, unmatched rate, ROUGE-L and tokens/s on held-out rows."""
    import tempfile

    settings = RewardModelSettings.from_pipeline(pipeline_config(config, set_))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            data, fb = artifact(rm_data, "rm_data"), artifact(feedback, "feedback")
            report, paths = stage.evaluate(_exists(model), data, fb, settings, out or Path(tmp), split=split)
        except ValueError as exc:
            fail(str(exc))
    _print_metrics(report.metrics)
    if out is not None:
        echo(f"report: {paths['markdown']}")


@rm_app.command("score")
@guard
def score_cmd(
    feedback: Path = typer.Argument(..., help="Feedback file with task, prompt and response columns."),
    model: Path = typer.Option(..., "--model", "-m", help="Tagger folder, adapter folder or full model folder."),
    output: Path = typer.Option(
        ..., "--output", "-o", help="JSONL: id, status, critique, good_spans, poor_spans, error, raw."
    ),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Critique and quote spans for every response; a failed parse is a status in the output, not an error."""
    from t2g_core.models.loading import default_device, resolve_dtype
    from t2g_core.reward_model.scoring import load_scorer

    df = load_feedback(_exists(feedback))
    pipe = pipeline_config(config, set_)
    dtype = resolve_dtype(pipe.models.dtype, default_device())
    scorer = load_scorer(_exists(model), pipe.reward_model, dtype=dtype)
    rows = df[["id", "task", "prompt", "response"]].to_dict("records")
    parsed = scorer.critique_batch(rows)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8") as fh:
        for row, p in zip(rows, parsed, strict=True):
            record = {"id": row["id"]} | {k: getattr(p, k) for k in SCORED_FIELDS}
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    n_ok = sum(p.ok for p in parsed)
    echo(f"scored {len(parsed)} responses ({n_ok} parsed, {len(parsed) - n_ok} failed) -> {output}")


def register(app: typer.Typer) -> None:
    app.add_typer(rm_app, name="rm")
