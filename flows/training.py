"""Policy training: span-reward PPO from the warm-started policy; the adapter is registered in MLflow."""

from __future__ import annotations

from prefect import flow
from prefect.logging import get_logger

from flows.stages import is_ref, not_built, stage_task
from t2g_core.config import PipelineConfig
from tasks.caching import cached

POLICY_MODEL = "text2grad-policy"


@flow(name="train-policy", persist_result=True, result_serializer="json")
def train_policy(config: PipelineConfig, data: dict, reward_model: dict, forced: set[str] | None = None) -> dict:
    """PPO on the feedback prompts with the configured reward source; returns the policy adapter reference."""
    ppo = stage_task("ppo", "train_policy")
    if ppo is None:
        return not_built("ppo")
    uses_rm = config.ppo.reward_source == "reward_model"
    if uses_rm and not is_ref(reward_model):
        return not_built("ppo", "reward_source=reward_model but the reward model was not trained")
    rm = reward_model if uses_rm else None

    def register(task, task_run, state) -> None:  # on_completion: only a task run that trained has a stage run
        register_policy(config, rm, str(task_run.id), state.result())

    step = cached(ppo, config.workspace.root, refresh="ppo" in (forced or set())).with_options(on_completion=[register])
    return step(data["feedback"], data["models"], rm, config.ppo, config.workspace)


def _rm_version(config: PipelineConfig, reward_model: dict | None) -> tuple[str, str] | None:
    if not reward_model or not reward_model.get("version"):
        return None
    return config.reward_model.registered_name, str(reward_model["version"])


def register_policy(config: PipelineConfig, reward_model: dict | None, task_run_id: str, result: dict) -> str | None:
    """Log the PPO adapter as a LoggedModel of the PPO stage run, register it (alias ``candidate``), and record the
    reward-model version it was trained against, so ``t2g lineage`` can walk back from the policy."""
    from tasks import tracking

    with tracking.task_run_stage(task_run_id, config.workspace) as run:
        if run is None:
            return None
        rm = _rm_version(config, reward_model)
        if rm:
            tracking.log_model_input(*rm)
        version = tracking.log_adapter_model(
            result["adapter_dir"],
            POLICY_MODEL,
            params=config.ppo,
            metrics=result.get("metrics") or {},
            alias="candidate",
        )
    get_logger("text2grad").info("policy adapter registered as %s version %s", POLICY_MODEL, version)
    return version
