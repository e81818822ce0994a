"""``t2g align``: place the annotations' quoted spans in the responses and write the ``spans`` artifact."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, artifact, echo, guard, pipeline_config, read_extra, stage_context
from t2g_core.config.stages import AlignSettings
from t2g_core.stages import align as stage
from t2g_core.stages.io import read


@guard
def align(
    feedback: Path = typer.Argument(..., help="Feedback file or artifact folder (Parquet, JSONL, CSV)."),
    annotations: Path = typer.Argument(..., help="Annotations artifact folder or Parquet file."),
    output: Path = typer.Option(
        ...,
        "--output",
        "-o",
        help="Spans Parquet file (*.parquet, metrics beside it in *.metrics.json) or a folder to hold the spans "
        "artifact.",
    ),
    tokenizer: str | None = typer.Option(
        None, help="Tokenizer folder: also report the fraction of response tokens labelled."
    ),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Locate every quoted span (exact -> normalised -> fuzzy), write the spans, print alignment metrics."""
    pcfg = pipeline_config(config, set_)
    settings = AlignSettings.from_pipeline(pcfg)
    fb, ann = artifact(feedback, "feedback"), artifact(annotations, "annotations")
    params = {"feedback": fb, "annotations": ann, "tokenizer": tokenizer, "settings": settings}
    ref = stage.align(fb, ann, tokenizer, settings, stage_context("align", pcfg.workspace.root, params, output))
    echo(f"spans: {ref.path} ({ref.n_rows} spans from {read(ref, 'spans')['id'].nunique()} items)")
    for key, value in read_extra(ref)["metrics"].items():
        echo(f"  {key:<24} {value:.4g}")


def register(app: typer.Typer) -> None:
    app.command("align")(align)
