"""Evaluation: task metrics of the policy before and after PPO, with paired bootstrap intervals."""

from __future__ import annotations

from prefect import flow

from flows.stages import is_ref, not_built, stage_task
from t2g_core.config import PipelineConfig
from tasks.caching import cached


@flow(name="evaluate")
def evaluate(config: PipelineConfig, data: dict, policy: dict, forced: set[str] | None = None) -> dict:
    """Compare the warm-started policy with the PPO policy on held-out prompts; returns the report reference."""
    task = stage_task("evaluate", "evaluate_policy")
    if task is None or not is_ref(policy):
        return not_built("evaluate", "its task module is not written yet" if task is None else "no trained policy")
    step = cached(task, config.workspace.root, refresh="evaluate" in (forced or set()))
    return step(data["feedback"], data["models"], policy, config.evaluate, config.workspace, config.data)
