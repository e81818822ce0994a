"""Alignment stage: every quoted span of the annotations placed in its response (character offsets, match type)."""

from __future__ import annotations

from t2g_core.alignment import alignment_stats
from t2g_core.config.stages import AlignSettings
from t2g_core.stages.context import StageContext
from t2g_core.stages.io import read
from t2g_core.stages.refs import ArtifactRef


def align(
    feedback: ArtifactRef, annotations: ArtifactRef, tokenizer: str | None, settings: AlignSettings, ctx: StageContext
) -> ArtifactRef:
    """The spans artifact and its metrics (unmatched rate, match-type mix, and the labelled fraction of the tokens of
    ``tokenizer`` (the policy's) when given)."""
    from t2g_core.spans import align_frame

    cfg = settings.align
    fb = read(feedback, "feedback")
    spans = align_frame(fb, read(annotations, "annotations"), cfg, annotations_file=annotations.path)
    responses = dict(zip(fb["id"], fb["response"], strict=True))
    labels = _policy_labels(spans, responses, tokenizer, cfg) if tokenizer else None
    metrics = alignment_stats(spans, responses, labels)
    ref = ctx.out.artifact("spans", spans, "spans", extra={"metrics": metrics})
    ctx.tracker.log_input(annotations, "annotations", "annotation")
    ctx.tracker.log_output(ref, "spans")
    ctx.tracker.log_metrics({f"align.{k}": v for k, v in metrics.items()})
    return ref


def _policy_labels(spans_df, responses: dict[str, str], tokenizer: str, cfg) -> list[list[float]]:
    """Token labels under ``tokenizer`` (for the labelled-token fraction)."""
    from t2g_core.models.loading import load_tokenizer
    from t2g_core.spans import spans_by_item, token_labels_batch

    tok = load_tokenizer(tokenizer, padding_side=None)
    by_item, ids = spans_by_item(spans_df), list(responses)
    return token_labels_batch([responses[i] for i in ids], [by_item.get(i, []) for i in ids], tok, cfg)
