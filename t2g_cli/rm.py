"""``t2g rm``: build the reward model's data, train it, evaluate it and score responses with it."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, echo, fail, guard, pipeline_config

rm_app = typer.Typer(help="Generative reward model: build-data, train, eval, score.", no_args_is_help=True)

BaseOpt = typer.Option(
    ..., "--base", "-b", help="Base model folder or Hugging Face id (its tokenizer renders the prompts)."
)


def _exists(path: Path) -> Path:
    if not path.exists():
        fail(f"{path}: no such file or folder")
    return path


def _read(path: Path, schema: str):
    from t2g_core.store import read_artifact

    return read_artifact(_exists(path), schema)


def _print_metrics(metrics: dict[str, float]) -> None:
    for key, value in sorted(metrics.items()):
        echo(f"  {key:<28} {value:.4g}")


class _EchoTracker:
    """Prints the training loss every few logged steps."""

    def __init__(self, every: int = 10):
        self.every, self.n = every, 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if "rm/loss" in metrics:
            self.n += 1
            if self.n % self.every == 1:
                echo(f"  step {step}: loss {metrics['rm/loss']:.4f}")

    def log_artifact(self, path: str) -> None:
        pass


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
    from transformers import AutoTokenizer

    from t2g_core.feedback import load_feedback
    from t2g_core.reward_model.data import build_rm_data
    from t2g_core.store import ArtifactStore, artifact_key, sha256_file, write_parquet

    pipe = pipeline_config(config, set_)
    cfg = pipe.reward_model
    df, stats = build_rm_data(
        load_feedback(_exists(feedback)),
        _read(annotations, "annotations"),
        AutoTokenizer.from_pretrained(base),
        cfg,
        spans_df=_read(spans, "spans") if spans else None,
        align_cfg=pipe.align,
    )
    if output.suffix == ".parquet":
        where = str(write_parquet(df, output, "rm_data"))
    else:
        src = [p / "data.parquet" if p.is_dir() else p for p in (feedback, annotations)]
        key = artifact_key(
            "rm_data", cfg, {"feedback": sha256_file(src[0]), "annotations": sha256_file(src[1]), "base": base}
        )
        where = (
            ArtifactStore(output.parent)
            .write(output.name, key, df, "rm_data", extra={"stats": stats.as_metrics()})
            .path
        )
    echo(f"rm_data: {where} ({stats.n_train} train, {stats.n_validation} validation)")
    _print_metrics(stats.as_metrics())


@rm_app.command("train")
@guard
def train(
    rm_data: Path = typer.Argument(..., help="rm_data artifact folder or Parquet file."),
    base: str = BaseOpt,
    out: Path = typer.Option(..., "--out", "-o", help="Run folder: checkpoints/ and the final adapter/."),
    resume: bool = typer.Option(True, help="Resume from the last checkpoint in --out (or skip a finished run)."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """LoRA SFT of the base on the train split (loss on the target only); checkpoints every save_steps."""
    from t2g_core.reward_model.train import train_rm

    cfg = pipeline_config(config, set_).reward_model
    result = train_rm(cfg, base, _read(rm_data, "rm_data"), out, tracker=_EchoTracker(), resume=resume, progress=False)
    how = f"resumed from {result.resumed_from}" if result.resumed_from else "from scratch"
    echo(f"adapter: {result.adapter_dir} ({result.global_step} steps, {how}, {result.train_seconds:.1f} s)")


@rm_app.command("eval")
@guard
def evaluate(
    rm_data: Path = typer.Argument(..., help="rm_data artifact folder or Parquet file."),
    feedback: Path = typer.Argument(
        ..., help="Feedback the rm_data was built from (for the responses and demo truth)."
    ),
    model: Path = typer.Option(
        ..., "--model", "-m", help="Adapter folder (from `t2g rm train`) or a full model folder."
    ),
    split: str = typer.Option("validation", help="Which split of rm_data to evaluate."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Folder for metrics.json, report.md and items.parquet."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """JSON-valid rate, span/token P/R/F1 vs gold, unmatched rate, ROUGE-L and tokens/s on held-out rows."""
    from t2g_core.feedback import load_feedback
    from t2g_core.reward_model.evaluate import evaluate_adapter, write_eval_report

    pipe = pipeline_config(config, set_)
    try:
        report = evaluate_adapter(
            _exists(model),
            _read(rm_data, "rm_data"),
            load_feedback(_exists(feedback)),
            pipe.reward_model,
            split=split,
            align_cfg=pipe.align,
        )
    except ValueError as exc:
        fail(str(exc))
    _print_metrics(report.metrics)
    if out is not None:
        echo(f"report: {write_eval_report(report, out)['markdown']}")


@rm_app.command("score")
@guard
def score_cmd(
    feedback: Path = typer.Argument(..., help="Feedback file with task, prompt and response columns."),
    model: Path = typer.Option(..., "--model", "-m", help="Adapter folder or full model folder."),
    output: Path = typer.Option(
        ..., "--output", "-o", help="JSONL: id, status, critique, good_spans, poor_spans, error, raw."
    ),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Critique and quote spans for every response; a failed parse is a status in the output, not an error."""
    from t2g_core.feedback import load_feedback
    from t2g_core.reward_model.scoring import RewardModelScorer

    df = load_feedback(_exists(feedback))
    scorer = RewardModelScorer(_exists(model), pipeline_config(config, set_).reward_model)
    rows = df[["id", "task", "prompt", "response"]].to_dict("records")
    parsed = scorer.critique_batch(rows)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8") as fh:
        for row, p in zip(rows, parsed, strict=True):
            fh.write(
                json.dumps(
                    {
                        "id": row["id"],
                        "status": p.status,
                        "critique": p.critique,
                        "good_spans": p.good_spans,
                        "poor_spans": p.poor_spans,
                        "error": p.error,
                        "raw": p.raw,
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    n_ok = sum(p.ok for p in parsed)
    echo(f"scored {len(parsed)} responses ({n_ok} parsed, {len(parsed) - n_ok} failed) -> {output}")


def register(app: typer.Typer) -> None:
    app.add_typer(rm_app, name="rm")
