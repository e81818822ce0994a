"""PPO stage: the feedback prompts, the policy before PPO and a reward source -> a trained LoRA policy adapter.

The run folder (``<checkpoints/ppo>/<key>``) holds ``run.json`` (the settings below), the prompt split, checkpoints,
history, rollouts and heatmaps. A run that finds its latest checkpoint there continues from it (a killed run resumes
exactly); a forced run starts from the warm start again.
"""

from __future__ import annotations

from pathlib import Path

from t2g_core.config.stages import PPOSettings
from t2g_core.stages.context import GateFailed, StageContext, one_writer
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
    from t2g_core.ppo.distributed import rank_and_world
    from t2g_core.ppo.run import prepare_run

    if settings.uses_reward_model and reward_model_path(settings, reward_model) is None:
        raise ValueError("ppo.reward_source=reward_model needs a trained reward model (or ppo.reward_model_path)")
    if settings.uses_reward_model:
        gate_reward_model(settings, reward_model, ctx.log)
    loop_on, why = settings.critique_loop(rank_and_world()[1])  # decided here, once
    if settings.uses_reward_model:  # a learned reward: say whether it is audited on the policy's rollouts
        ctx.log(f"critique loop {'on' if loop_on else 'off'} ({why})")
    with ctx.own_folder("checkpoints/ppo", fresh=True) as run_dir:
        latest = latest_checkpoint(run_dir) if run_dir.exists() else None
        if latest is None:
            fb = read(feedback, "feedback")
            if loop_on and reward_model is not None:  # the items the reward model trained on (its own samples too)
                from t2g_core.critique_loop import write_replay  # the loop's annotators and tests: only when it is on

                trained_on = read(reward_model.feedback, "feedback") if reward_model.feedback is not None else fb
                write_replay(run_dir, read(reward_model.rm_data, "rm_data"), trained_on)
            prepare_run(settings, run_dir, fb, models.policy, reward_model_path(settings, reward_model))
        else:
            ctx.log(f"PPO resumes from {latest.name} of {settings.ppo.steps} steps ({run_dir})")
        ctx.tracker.log_input(feedback, "feedback", "training")
        return _run(
            run_dir, ctx, api_key, reward_facts(settings, reward_model), resume=latest is not None, loop_on=loop_on
        )


class WeakRewardModel(GateFailed, ValueError):
    """The reward model is below a quality floor of ``ppo.reward_model_gate`` on held-out items."""


FLAWS = ("invented", "swapped", "redundant")


def reward_model_metrics(settings: PPOSettings, reward_model: RewardModelRef | None) -> dict[str, float] | None:
    """The held-out metrics of the reward model PPO would score with: the trained one's, or those its evaluation
    left beside ``ppo.reward_model_path`` (``../eval/metrics.json``); None when there are none."""
    import json

    if settings.uses_trained_reward_model and reward_model is not None:
        return dict(reward_model.metrics)
    path = Path(reward_model_path(settings, reward_model) or "")
    found = path.parent / "eval" / "metrics.json"
    return json.loads(found.read_text(encoding="utf-8")) if found.is_file() else None


def measured_on(metrics: dict[str, float]) -> str:
    """The prefix of the figures the gate reads: ``policy_`` when measured on the policy's own text."""
    return "policy_" if any(k.startswith("policy_") for k in metrics) else ""


def reward_model_shortfalls(metrics: dict[str, float], gate) -> list[str]:
    """Each held-out metric below its floor, as 'metric = value < ppo.reward_model_gate.floor': on the policy's own
    text (``policy_*``) when measured there; with ground truth the poor-span F1 and each flaw's recall, else the
    agreement with the annotator."""
    prefix = measured_on(metrics)
    if f"{prefix}truth_poor_char_f1" in metrics:
        floors = {"truth_poor_char_f1": "min_poor_f1"} | {f"truth_recall_{f}": "min_flaw_recall" for f in FLAWS}
    else:
        floors = {"span_f1": "min_agreement_f1"}
    return [
        f"{prefix}{metric} = {metrics[prefix + metric]:.3f} < ppo.reward_model_gate.{floor} {getattr(gate, floor):g}"
        for metric, floor in floors.items()
        if prefix + metric in metrics and metrics[prefix + metric] < getattr(gate, floor)
    ]


def gate_reward_model(settings: PPOSettings, reward_model: RewardModelRef | None, log) -> None:
    """Refuse (:class:`WeakRewardModel`) to start PPO on a reward model below ``ppo.reward_model_gate``'s floors
    unless ``allow_weak``; a reward model without held-out metrics is let through with a log line saying so."""
    gate = settings.ppo.reward_model_gate
    metrics = reward_model_metrics(settings, reward_model)
    if metrics is None:
        log("reward-model gate: no held-out metrics for this reward model, so its quality is not checked")
        return
    short = reward_model_shortfalls(metrics, gate)
    if not short:
        return
    where = f" (report: {reward_model.report})" if reward_model is not None and reward_model.report else ""
    ceiling = metrics.get(f"{measured_on(metrics)}annotator_truth_poor_char_f1")
    if ceiling is not None:  # the labels it learnt from, against the same truth
        where += f"; the annotator's own labels reach poor-span F1 {ceiling:.3f} against the truth on the same items"
    steps = f" ({reward_model.global_step} steps)" if reward_model is not None and reward_model.global_step else ""
    message = (
        f"the reward model is below its quality floor on held-out items: {'; '.join(short)}{where}. Likely cause: it "
        f"trained too briefly{steps} or on too few items. PPO would learn from rewards that miss or misplace these "
        "errors. Train it on more items or for longer (reward_model.epochs, reward_model.max_steps), or set "
        "ppo.reward_model_gate.allow_weak=true to train PPO on it anyway."
    )
    if not gate.allow_weak:
        raise WeakRewardModel(f"PPO does not start: {message}")
    log(f"warning: {message} (allowed by ppo.reward_model_gate.allow_weak)")


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
    from t2g_core.ppo.run import read_settings

    settings = read_settings(run_dir)
    with one_writer(Path(run_dir), ctx.run_id or f"t2g ppo resume {run_dir}"):
        reward = {"source": settings.ppo.reward_source}
        return _run(run_dir, ctx, api_key, reward, resume=True, loop_on=settings.critique_loop()[0])


def _run(run_dir, ctx: StageContext, api_key: str | None, reward: dict, *, resume: bool, loop_on: bool) -> PolicyRef:
    """Train the run in ``run_dir`` (watched by the critique loop when ``loop_on``) and describe the policy."""
    from t2g_core.ppo.report import write_heatmap_index
    from t2g_core.ppo.run import run_from_dir

    hook = None
    if loop_on:
        from t2g_core.critique_loop import loop_factory  # its annotators and tests load only when it is on

        hook = loop_factory(api_key=api_key, progress=ctx.on_progress)
    result = run_from_dir(
        run_dir, resume=resume, tracker=ctx.tracker, api_key=api_key, progress=ctx.on_progress, hook=hook
    )
    run_dir = Path(result.run_dir)
    ctx.tracker.log_artifact(run_dir / "history.json")
    index = write_heatmap_index(run_dir / "heatmaps")
    if index is not None:  # the steps' pages were logged as they were written; those of a run before a resume too
        logged = {Path(p).name for p in result.heatmaps}
        for page in [index, *(p for p in sorted(index.parent.glob("step-*.html")) if p.name not in logged)]:
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
        reward_models=[refreshed_model(m, result.history) for m in result.reward_models],
    )


def refreshed_model(refreshed: dict, history: list[dict]) -> dict:
    """A reward model the critique loop refreshed: folder, round, step, and that round's ``critique_loop/*`` audit."""
    row = next((h for h in history if h.get("step") == refreshed["step"]), {})
    prefix = "critique_loop/"
    audit = {k.removeprefix(prefix): float(v) for k, v in row.items() if k.startswith(prefix)}
    return {**refreshed, "metrics": audit}
