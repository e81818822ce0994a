"""Annotation: critiques and quoted good/poor spans for every feedback item."""

from __future__ import annotations

from prefect import flow

from flows.stages import not_built, stage_task
from t2g_core.config import PipelineConfig
from tasks.caching import cached


@flow(name="annotate")
def annotate(config: PipelineConfig, feedback: dict, forced: set[str] | None = None) -> dict:
    """Annotate ``feedback`` with the configured annotator; returns the annotations artifact reference."""
    task = stage_task("annotate", "annotate")
    if task is None:
        return not_built("annotate")
    step = cached(task, config.workspace.root, refresh="annotate" in (forced or set()))
    return step(feedback, config.annotate, config.workspace)
