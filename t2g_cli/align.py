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


def _token_label_vectors(tokenizer: str, spans_df, responses: dict[str, str], cfg) -> list[list[float]]:
    from transformers import AutoTokenizer

    from t2g_core.spans import spans_by_item, token_labels_batch

    tok = AutoTokenizer.from_pretrained(tokenizer)
    by_item, ids = spans_by_item(spans_df), list(responses)
    return token_labels_batch([responses[i] for i in ids], [by_item.get(i, []) for i in ids], tok, cfg)


def _frame_digest(df) -> str:
    import hashlib

    return hashlib.sha256(df.to_json(orient="records", force_ascii=False).encode()).hexdigest()


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
    from t2g_core.alignment import alignment_stats
    from t2g_core.feedback import load_feedback
    from t2g_core.store import ArtifactStore, artifact_key, write_parquet

    cfg = pipeline_config(config, set_).align
    feedback_df, annotations_df = load_feedback(feedback), _read_annotations(annotations)
    spans_df = align_frame(feedback_df, annotations_df, cfg, annotations_file=str(annotations))
    responses = dict(zip(feedback_df["id"], feedback_df["response"], strict=True))
    labels = _token_label_vectors(tokenizer, spans_df, responses, cfg) if tokenizer else None
    metrics = alignment_stats(spans_df, responses, labels)
    if output.suffix == ".parquet":
        where = str(write_parquet(spans_df, output, "spans"))
        output.with_suffix(".metrics.json").write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    else:
        inputs = {"feedback": _frame_digest(feedback_df), "annotations": _frame_digest(annotations_df)}
        ref = ArtifactStore(output.parent).write(
            output.name, artifact_key("spans", cfg, inputs), spans_df, "spans", extra={"metrics": metrics}
        )
        where = ref.path
    echo(f"spans: {where} ({len(spans_df)} spans from {spans_df['id'].nunique()} items)")
    _print_metrics(metrics)


def register(app: typer.Typer) -> None:
    app.command("align")(align)
