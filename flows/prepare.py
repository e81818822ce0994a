"""Data preparation: the feedback artifact and the base models."""

from __future__ import annotations

from prefect import flow

from t2g_core.config import PipelineConfig
from tasks.caching import cached
from tasks.data import build_models, materialise_feedback


@flow(name="prepare-data")
def prepare_data(config: PipelineConfig, forced: set[str] | None = None) -> dict:
    """Feedback (demo data or the configured file) and the policy / reward-model base models."""
    forced, root = forced or set(), config.workspace.root
    feedback = cached(materialise_feedback, root, refresh="feedback" in forced)(config.data, config.workspace)
    models = cached(build_models, root, refresh="models" in forced)(config.models, feedback, config.workspace)
    return {"feedback": feedback, "models": models}
