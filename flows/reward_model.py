"""Generative reward model: build (prompt, critique + span JSON) pairs, LoRA fine-tune, evaluate."""

from __future__ import annotations

from prefect import flow

from flows.stages import is_ref, not_built, stage_task
from t2g_core.config import PipelineConfig
from tasks.caching import cached


@flow(name="train-reward-model", persist_result=True, result_serializer="json")
def train_reward_model(
    config: PipelineConfig, data: dict, annotations: dict, quality: dict, forced: set[str] | None = None
) -> dict:
    """Train the reward model on validated annotations; returns its adapter reference and registered version."""
    train = stage_task("reward_model", "train_reward_model")
    if train is None or not is_ref(quality.get("validation")):
        return not_built(
            "reward_model", "its task module is not written yet" if train is None else "validation did not run"
        )
    step = cached(train, config.workspace.root, refresh="reward_model" in (forced or set()))
    return step(
        data["feedback"],
        annotations,
        quality["validation"],
        data["models"],
        config.reward_model,
        config.workspace,
        spans=quality.get("spans"),
    )
