"""Annotation stage: feedback -> one annotations row per item (LLM, code critic or reference critic).

Also the dataset's versions: :func:`merge` folds the annotations of new items into the current annotations.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from t2g_core.config.stages import AnnotateSettings
from t2g_core.stages.context import StageContext
from t2g_core.stages.io import read
from t2g_core.stages.labelling import label
from t2g_core.stages.refs import ArtifactRef


def annotate(
    feedback: ArtifactRef,
    settings: AnnotateSettings,
    ctx: StageContext,
    *,
    api_key: str | None = None,
    previous: ArtifactRef | None = None,
    cache_dir: str | Path | None = None,
) -> ArtifactRef:
    """Annotate every item (failures are statuses); ``previous`` serves ``only_failed``. Rows that lack what the
    annotator needs fail the stage first (:func:`t2g_core.stages.preflight.check`). The API key is never stored; LLM
    answers are cached under ``cache_dir`` (default ``<workspace>/cache/annotate``)."""
    ctx.tracker.log_input(feedback, "feedback", "annotation")
    prev = read(previous, "annotations") if previous is not None else None
    frame = read(feedback, "feedback")
    return label(frame, settings, ctx, "annotations", "annotate", api_key=api_key, previous=prev, cache_dir=cache_dir)


def unannotated(feedback: ArtifactRef, annotations: ArtifactRef | None, ctx: StageContext) -> ArtifactRef:
    """The feedback items that ``annotations`` does not cover yet (all of them when there are none)."""
    fb = read(feedback, "feedback")
    done = set(read(annotations, "annotations")["id"]) if annotations is not None else set()
    todo = fb[~fb["id"].isin(done)].reset_index(drop=True)
    ctx.log(f"{len(todo)} of {len(fb)} feedback items need annotations")
    return ctx.out.artifact("feedback_todo", todo, "feedback", extra={"feedback": feedback.sha256})


def merge(previous: ArtifactRef | None, delta: ArtifactRef, ctx: StageContext) -> ArtifactRef:
    """The previous annotations plus ``delta``'s (a newer row for an id replaces the older one)."""
    frames = [read(previous, "annotations")] if previous is not None else []
    frames.append(read(delta, "annotations"))
    merged = pd.concat(frames, ignore_index=True).drop_duplicates("id", keep="last").reset_index(drop=True)
    ref = ctx.out.artifact("annotations", merged, "annotations", extra={"delta": delta.sha256})
    if previous is not None:
        ctx.tracker.log_input(previous, "annotations", "annotation")
    ctx.tracker.log_input(delta, "annotations_delta", "annotation")
    ctx.tracker.log_output(ref, "annotations")
    ctx.tracker.log_metrics({"items": len(merged)})
    return ref
