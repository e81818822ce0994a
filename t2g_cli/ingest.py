"""``t2g ingest``: public datasets (by adapter) or any dataset (by a column mapping) -> the feedback schema."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import echo, fail, guard, one_line, stage_context
from t2g_core.config import DataConfig
from t2g_core.config.stages import FeedbackSettings
from t2g_core.ingest.mapped import parse_columns
from t2g_core.stages import feedback
from t2g_core.stages.refs import SourceRef


@guard
def ingest_cmd(
    adapter: str | None = typer.Argument(
        None, help="slf5k | ultrafeedback | kodcode | humaneval | mbpp (or use --dataset with --columns)."
    ),
    path: Path | None = typer.Option(None, "--path", help="Local files in the adapter's own format (else the Hub)."),
    dataset: str | None = typer.Option(
        None,
        "--dataset",
        help="Any dataset: a Hugging Face id or a local file / folder (JSON, JSONL, Parquet, CSV); needs --columns.",
    ),
    columns: str | None = typer.Option(
        None,
        "--columns",
        help="FEEDBACK=DATASET column pairs, e.g. prompt=question,response=answer[,id=qid,reference=gold].",
    ),
    task: str = typer.Option("summarization", "--task", help="Task of the rows read with --columns."),
    split: str | None = typer.Option(None, "--split", help="Split name (default per adapter; train with --columns)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Keep at most N rows (only those are read)."),
    output: Path = typer.Option(..., "-o", "--output", help="Feedback file to write (.parquet, .jsonl or .csv)."),
) -> None:
    """Convert a dataset to feedback rows (validated) and write them."""
    from pydantic import ValidationError

    if (adapter is None) == (dataset is None) or (dataset is not None) != (columns is not None):
        fail("name an adapter (t2g ingest slf5k ...) or a dataset with its columns (--dataset ID --columns ...)")
    try:
        if dataset is not None:
            data = DataConfig(dataset=dataset, columns=parse_columns(columns), task=task, split=split, limit=limit)
        else:
            data = DataConfig(dataset=adapter, source=str(path) if path else "hub", split=split, limit=limit)
    except ValidationError as exc:
        fail(one_line(exc))
    except ValueError as exc:
        fail(str(exc))
    settings = FeedbackSettings(data=data)
    source = SourceRef.of(data)
    ref = feedback.materialise(
        source, settings, stage_context("feedback", output.parent, {"source": source, "settings": settings}, output)
    )
    echo(f"{output}: {ref.n_rows} feedback rows from {dataset or adapter}")


def register(app: typer.Typer) -> None:
    app.command(
        "ingest", help="Convert SLF5K, UltraFeedback, KodCode, HumanEval, MBPP or any dataset (--columns) to feedback."
    )(ingest_cmd)
