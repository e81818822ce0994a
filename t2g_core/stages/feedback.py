"""Feedback stage: the configured source (demo data, a dataset adapter or a file) -> a validated feedback artifact.

Also the dataset's versions: :func:`append` adds the new items of an inbox file as the next version.
"""

from __future__ import annotations

import pandas as pd

from t2g_core.config.data import DataConfig
from t2g_core.config.stages import FeedbackSettings
from t2g_core.demo import make_demo_feedback
from t2g_core.feedback import load_feedback
from t2g_core.ingest import ingest
from t2g_core.ingest.mapped import mapped_feedback
from t2g_core.stages.context import StageContext
from t2g_core.stages.io import read
from t2g_core.stages.refs import ArtifactRef, SourceRef


def source_frame(data: DataConfig) -> pd.DataFrame:
    """The feedback rows ``data`` names: a public dataset, the built-in demo data, or a feedback file."""
    if data.columns is not None:
        return mapped_feedback(data.dataset, data.columns, task=data.task, split=data.split, limit=data.limit)
    if data.dataset is not None:
        path = None if data.source in ("hub", "demo") else data.source
        return ingest(data.dataset, path, split=data.split, limit=data.limit)
    if data.source == "demo":
        return make_demo_feedback(data.task, data.n_items, data.seed)

    df = load_feedback(data.source)
    return df.head(data.limit).reset_index(drop=True) if data.limit is not None else df


def materialise(source: SourceRef, settings: FeedbackSettings, ctx: StageContext) -> ArtifactRef:
    """Write the feedback rows of ``settings.data`` (whose content identity is ``source``) as an artifact."""
    df = source_frame(settings.data)
    ref = ctx.out.artifact("feedback", df, "feedback", extra={"source": settings.data.source, "origin": source.origin})
    ctx.tracker.log_output(ref, "feedback")
    ctx.tracker.log_metrics({"n_items": ref.n_rows})
    return ref


def append(new_file: ArtifactRef, current: ArtifactRef | None, ctx: StageContext) -> tuple[ArtifactRef, ArtifactRef]:
    """``current`` plus the items of ``new_file`` whose id it does not hold: (the new version, just the new items).
    Re-sent items never duplicate rows; a file with nothing new gives an empty delta."""
    incoming = read(new_file, "feedback")
    base = read(current, "feedback") if current is not None else incoming.iloc[0:0]
    fresh = incoming[~incoming["id"].isin(set(base["id"]))].reset_index(drop=True)
    delta = ctx.out.artifact("feedback_delta", fresh, "feedback", extra={"source": new_file.path})
    merged = pd.concat([base, fresh], ignore_index=True)
    extra = {"source": new_file.path, "parent": current.sha256 if current else None}
    version = ctx.out.artifact("feedback", merged, "feedback", extra=extra)
    ctx.log(
        f"{new_file.path}: {len(fresh)} new item(s), {len(incoming) - len(fresh)} already in the dataset "
        f"({len(merged)} items now)"
    )
    ctx.tracker.log_input(delta, "feedback_delta", "annotation")
    ctx.tracker.log_output(version, "feedback")
    ctx.tracker.log_metrics({"new_items": len(fresh), "items": len(merged)})
    return version, delta
