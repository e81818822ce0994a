"""``t2g ingest``: public datasets -> the feedback schema."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import echo, guard, stage_context


@guard
def ingest_cmd(
    dataset: str = typer.Argument(..., help="slf5k | ultrafeedback | kodcode | humaneval | mbpp"),
    path: Path | None = typer.Option(None, "--path", help="Local files in the dataset's own format (else the Hub)."),
    split: str | None = typer.Option(None, "--split", help="Split name (default per dataset)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Keep at most N feedback rows."),
    output: Path = typer.Option(..., "-o", "--output", help="Feedback file to write (.parquet, .jsonl or .csv)."),
) -> None:
    """Convert a public dataset to feedback rows (validated) and write them."""
    from t2g_core.config import DataConfig
    from t2g_core.stages import feedback
    from t2g_core.stages.refs import SourceRef
    from t2g_core.stages.settings import FeedbackSettings

    data = DataConfig(dataset=dataset, source=str(path) if path else "hub", split=split, limit=limit)
    settings = FeedbackSettings(data=data)
    source = SourceRef.of(data)
    ref = feedback.materialise(
        source, settings, stage_context("feedback", output.parent, {"source": source, "settings": settings}, output)
    )
    echo(f"{output}: {ref.n_rows} feedback rows from {dataset}")


def register(app: typer.Typer) -> None:
    app.command("ingest", help="Convert SLF5K, UltraFeedback, KodCode, HumanEval or MBPP to feedback rows.")(ingest_cmd)
