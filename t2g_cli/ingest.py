"""``t2g ingest``: public datasets -> the feedback schema."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import echo, guard


@guard
def ingest_cmd(
    dataset: str = typer.Argument(..., help="slf5k | ultrafeedback | kodcode | humaneval | mbpp"),
    path: Path | None = typer.Option(None, "--path", help="Local files in the dataset's own format (else the Hub)."),
    split: str | None = typer.Option(None, "--split", help="Split name (default per dataset)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Keep at most N feedback rows."),
    output: Path = typer.Option(..., "-o", "--output", help="Feedback Parquet file to write."),
) -> None:
    """Convert a public dataset to feedback rows (validated) and write them as Parquet."""
    from t2g_core.ingest import ingest
    from t2g_core.store import write_parquet

    df = ingest(dataset, path=path, split=split, limit=limit)
    write_parquet(df, output, "feedback")
    echo(f"{output}: {len(df)} feedback rows from {dataset}")


def register(app: typer.Typer) -> None:
    app.command("ingest", help="Convert SLF5K, UltraFeedback, KodCode, HumanEval or MBPP to feedback rows.")(ingest_cmd)
