"""PPO stage: the feedback prompts, the policy before PPO and a reward source -> a trained LoRA policy adapter.

The run folder (``<checkpoints/ppo>/<key>``) holds ``run.json`` (the settings below), the prompt split, checkpoints,
history, rollouts and heatmaps. A run that finds its latest checkpoint there continues from it (a killed run resumes
exactly); a forced run starts from the warm start again.
"""

from __future__ import annotations

from pathlib import Path

from t2g_core.config.stages import PPOSettings
from t2g_core.stages.context import StageContext
from t2g_core.stages.io import read
from t2g_core.stages.refs import ArtifactRef, ModelsRef, PolicyRef, RewardModelRef, folder_digest


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

    if settings.uses_reward_model and reward_model_path(settings, reward_model) is None:
        raise ValueError("ppo.reward_source=reward_model needs a trained reward model (or ppo.reward_model_path)")
    with ctx.own_folder("checkpoints/ppo", fresh=True) as run_dir:
        latest = latest_checkpoint(run_dir) if run_dir.exists() else None
        if latest is None:
            prepare_run(
                settings, run_dir, read(feedback, "feedback"), models.policy, reward_model_path(settings, reward_model)
            )
        else:
            ctx.log(f"PPO resumes from {latest.name} of {settings.ppo.steps} steps ({run_dir})")
        ctx.tracker.log_input(feedback, "feedback", "training")
        resumed = latest is not None
        result = run_from_dir(run_dir, resume=resumed, tracker=ctx.tracker, api_key=api_key, progress=ctx.on_progress)
        return _finish(result, ctx, reward_facts(settings, reward_model))


RM_QUALITY = ("truth_poor_char_f1", "truth_recall_invented", "truth_span_f1", "span_f1", "unmatched_span_rate")


def reward_facts(settings: PPOSettings, reward_model: RewardModelRef | None) -> dict[str, float | str]:
    """What the reward came from: the source, and the reward model's kind and held-out quality when one was used."""
    facts: dict[str, float | str] = {"source": settings.ppo.reward_source}
    if settings.uses_trained_reward_model and reward_model is not None:
        facts["kind"] = reward_model.kind
        facts |= {f"rm_{k}": reward_model.metrics[k] for k in RM_QUALITY if k in reward_model.metrics}
    return facts


def run_reward_stats(history: list[dict]) -> dict[str, float]:
    """The share of the PPO step time spent scoring rollouts, and the rollouts' unmatched-quote rate, over the run."""
    step = sum(h.get("time/step", 0.0) for h in history)
    out = {"score_share": sum(h.get("time/score", 0.0) for h in history) / step} if step else {}
    rates = [h["spans/unmatched_rate"] for h in history if "spans/unmatched_rate" in h]
    return out | ({"rollout_unmatched_rate": sum(rates) / len(rates)} if rates else {})


def resume(run_dir: str | Path, ctx: StageContext, *, api_key: str | None = None) -> PolicyRef:
    """Continue the run in ``run_dir`` from its latest checkpoint, exactly as if it had not stopped."""
    from t2g_core.ppo.run import read_settings, run_from_dir
    from t2g_core.stages.context import one_writer

    with one_writer(Path(run_dir), ctx.run_id or f"t2g ppo resume {run_dir}"):
        result = run_from_dir(run_dir, resume=True, tracker=ctx.tracker, api_key=api_key, progress=ctx.on_progress)
        return _finish(result, ctx, {"source": read_settings(run_dir).ppo.reward_source})


def _finish(result, ctx: StageContext, reward: dict[str, float | str]) -> PolicyRef:
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
        reward=reward | run_reward_stats(result.history),
    )
