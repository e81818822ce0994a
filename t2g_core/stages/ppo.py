"""PPO stage: the feedback prompts, the policy before PPO and a reward source -> a trained LoRA policy adapter.

The run folder (``<checkpoints/ppo>/<key>``) holds ``run.json`` (the settings below), the prompt split, checkpoints,
history, rollouts and heatmaps. A run that finds its latest checkpoint there continues from it (a killed run resumes
exactly); a forced run starts from the warm start again.
"""

from __future__ import annotations

from pathlib import Path

from t2g_core.stages.context import StageContext
from t2g_core.stages.io import read
from t2g_core.stages.refs import ArtifactRef, ModelsRef, PolicyRef, RewardModelRef, folder_digest
from t2g_core.stages.settings import PPOSettings


def reward_model_path(settings: PPOSettings, reward_model: RewardModelRef | None) -> str | None:
    """The reward model PPO scores with: ``ppo.reward_model_path`` if set, else the trained one (if any)."""
    if settings.ppo.reward_model_path:
        return settings.ppo.reward_model_path
    return reward_model.model_dir if reward_model is not None else None


def train(
    feedback: ArtifactRef,
    models: ModelsRef,
    reward_model: RewardModelRef | None,
    settings: PPOSettings,
    ctx: StageContext,
    *,
    api_key: str | None = None,
) -> PolicyRef:
    """Train (or resume) PPO; the adapter is in ``adapter_dir``, the held-out prompts in ``run_dir/eval.parquet``.
    ``api_key`` (handed in by the caller, never stored) serves ``reward_source=endpoint``."""
    from t2g_core.ppo.checkpoint import latest_checkpoint
    from t2g_core.ppo.run import prepare_run, run_from_dir

    if settings.ppo.reward_source == "reward_model" and reward_model_path(settings, reward_model) is None:
        raise ValueError("ppo.reward_source=reward_model needs a trained reward model (or ppo.reward_model_path)")
    run_dir = ctx.fresh_folder("checkpoints/ppo")
    latest = latest_checkpoint(run_dir) if run_dir.exists() else None
    if latest is None:
        prepare_run(
            settings, run_dir, read(feedback, "feedback"), models.policy, reward_model_path(settings, reward_model)
        )
    else:
        ctx.log(f"PPO resumes from {latest.name} of {settings.ppo.steps} steps ({run_dir})")
    ctx.tracker.log_input(feedback, "feedback", "training")
    return _finish(run_from_dir(run_dir, resume=latest is not None, tracker=ctx.tracker, api_key=api_key), ctx)


def resume(run_dir: str | Path, ctx: StageContext, *, api_key: str | None = None) -> PolicyRef:
    """Continue the run in ``run_dir`` from its latest checkpoint, exactly as if it had not stopped."""
    from t2g_core.ppo.run import run_from_dir

    return _finish(run_from_dir(run_dir, resume=True, tracker=ctx.tracker, api_key=api_key), ctx)


def _finish(result, ctx: StageContext) -> PolicyRef:
    run_dir = Path(result.run_dir)
    ctx.tracker.log_artifact(run_dir / "history.json")
    for page in result.heatmaps[-3:]:
        ctx.tracker.log_artifact(page, "heatmaps")
    final = {k: float(v) for k, v in (result.history[-1] if result.history else {}).items() if k != "step"}
    rollouts = str(result.rollouts_path) if result.rollouts_path else None
    return PolicyRef(
        adapter_dir=str(result.adapter_dir),
        run_dir=str(run_dir),
        digest=folder_digest(result.adapter_dir),
        steps=result.steps_done,
        history_path=str(run_dir / "history.json"),
        rollouts_path=rollouts,
        metrics=final,
    )
