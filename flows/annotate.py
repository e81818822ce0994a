"""Annotation: critiques and quoted good/poor spans for every feedback item."""

from __future__ import annotations

from prefect import flow

from flows.stages import not_built, stage_task
from t2g_core.config import PipelineConfig
from tasks.caching import cached


@flow(name="annotate")
def annotate(config: PipelineConfig, feedback: dict, forced: set[str] | None = None) -> dict:
    """Annotate ``feedback`` with the configured annotator; returns the annotations artifact reference."""
    task = annotate_task(config)
    if task is None:
        return not_built("annotate")
    return cached(task, config.workspace.root, refresh="annotate" in (forced or set()))(
        feedback, config.annotate, config.workspace
    )


def annotate_task(config: PipelineConfig):
    """The LLM variant has Prefect retries (it talks to the outside world); the critics do not."""
    return stage_task("annotate", "annotate_llm" if config.annotate.annotator == "llm" else "annotate_critic")
