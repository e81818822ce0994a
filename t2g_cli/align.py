"""``t2g align``: place the annotations' quoted spans in the responses and write the ``spans`` artifact."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, echo, fail, guard, pipeline_config
from t2g_core.spans import align_frame  # pure; the Prefect task calls it too

__all__ = ["align_frame", "register"]


def _read_annotations(path: Path):
    from t2g_core.store import read_artifact

    if not path.exists():
        fail(f"{path}: no such file or folder")
    return read_artifact(path, "annotations")


def _print_metrics(metrics: dict[str, float]) -> None:
    for key, value in metrics.items():
        echo(f"  {key:<24} {value:.4g}")


@guard
def align(
    feedback: Path = typer.Argument(..., help="Feedback file or artifact folder (Parquet, JSONL, CSV)."),
    annotations: Path = typer.Argument(..., help="Annotations artifact folder or Parquet file."),
    output: Path = typer.Option(..., "--output", "-o", help="Where to write the spans Parquet file (.parquet) or artifact folder."),
    tokenizer: str | None = typer.Option(None, help="Tokenizer folder: also report the fraction of response tokens labelled."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Locate every quoted span (exact -> normalised -> fuzzy), write the spans, print alignment metrics."""
    from t2g_core.alignment import alignment_stats
    from t2g_core.feedback import load_feedback
    from t2g_core.spans import spans_by_item, token_labels_batch
    from t2g_core.store import ArtifactStore, artifact_key, sha256_file, write_parquet

    cfg = pipeline_config(config, set_).align
    feedback_df = load_feedback(feedback)
    spans_df = align_frame(feedback_df, _read_annotations(annotations), cfg, annotations_file=str(annotations))
    responses = dict(zip(feedback_df["id"], feedback_df["response"], strict=True))
    labels = None
    if tokenizer is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
        by_item = spans_by_item(spans_df)
        ids = list(responses)
        labels = token_labels_batch([responses[i] for i in ids], [by_item.get(i, []) for i in ids], tok, cfg)
    metrics = alignment_stats(spans_df, responses, labels)
    if output.suffix == ".parquet":
        write_parquet(spans_df, output, "spans")
        where = str(output)
    else:
        src = [p / "data.parquet" if p.is_dir() else p for p in (feedback, annotations)]
        key = artifact_key("spans", cfg, {"feedback": sha256_file(src[0]), "annotations": sha256_file(src[1])})
        ref = ArtifactStore(output.parent).write(output.name, key, spans_df, "spans", extra={"metrics": metrics})
        where = ref.path
    echo(f"spans: {where} ({len(spans_df)} spans from {spans_df['id'].nunique()} items)")
    _print_metrics(metrics)
    if output.suffix == ".parquet":
        output.with_suffix(".metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")


def register(app: typer.Typer) -> None:
    app.command("align")(align)
