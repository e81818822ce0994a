"""PPO task: feedback prompts + warm-started policy (+ reward model) -> a trained LoRA policy adapter.

The run folder is keyed by the PPO config and the content of its inputs; a re-run after a crash resumes from the
run's own latest checkpoint (training is not retried by Prefect, it continues); ``--refresh ppo`` starts it afresh.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task

from t2g_core.config import PPOConfig, WorkspaceConfig
from tasks import tracking
from tasks.caching import clear_if_forced, stage_task_options

RM_KEYS = ("adapter_dir", "model_dir", "path")


def _rm_path(reward_model: dict | None) -> str | None:
    for key in RM_KEYS:
        if reward_model and reward_model.get(key) and Path(reward_model[key]).exists():
            return str(reward_model[key])
    return None


@task(name="ppo", **stage_task_options(24 * 3600))
def train_policy(
    feedback: dict, models: dict, reward_model: dict | None, cfg: PPOConfig, workspace: WorkspaceConfig
) -> dict:
    """Returns {adapter_dir, run_dir, history_path, rollouts_path, steps, final metrics}."""
    from t2g_core.config import PipelineConfig
    from t2g_core.ppo.run import prepare_run, run_from_dir
    from t2g_core.store import artifact_key, read_artifact
    from t2g_core.workspace import Workspace

    rm_path = cfg.reward_model_path or _rm_path(reward_model)
    inputs = {"feedback": feedback["sha256"], "policy": str(models["policy"]), "reward_model": rm_path or "none"}
    run_dir = Workspace.at(workspace.root).checkpoints / "ppo" / artifact_key("ppo", cfg, inputs)
    clear_if_forced(run_dir)  # --refresh ppo: train again from the warm start, not resume the finished run
    resume = (run_dir / "checkpoints" / "latest").exists()
    if not resume:
        pipeline = PipelineConfig(workspace=workspace, ppo=cfg)
        prepare_run(pipeline, run_dir, read_artifact(feedback["path"], "feedback"), models["policy"], rm_path)
    with tracking.stage_run("ppo", {**cfg.model_dump(mode="json"), "resumed": resume}, workspace):
        tracking.log_dataset(feedback, "feedback", "training")
        result = run_from_dir(run_dir, resume=resume, tracker=tracking.MlflowTracker())
        tracking.log_artifact(run_dir / "history.json")
        for page in result.heatmaps[-3:]:
            tracking.log_artifact(page, "heatmaps")
    final = {k: v for k, v in (result.history[-1] if result.history else {}).items() if k != "step"}
    return {
        "adapter_dir": str(result.adapter_dir),
        "run_dir": str(run_dir),
        "history_path": str(run_dir / "history.json"),
        "rollouts_path": str(result.rollouts_path) if result.rollouts_path else None,
        "steps": result.steps_done,
        "metrics": final,
    }
