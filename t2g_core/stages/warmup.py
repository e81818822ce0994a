"""Warm-up stage: the policy before PPO, supervised on the reference responses of the training prompts.

The training prompts are PPO's (the feedback split by ``holdout`` as PPO splits it), so the warm-up never sees a
held-out prompt. The stage returns the models with ``policy`` replaced by the merged warmed-up model, PPO's start and
KL reference and the evaluation's baseline; a killed warm-up resumes, a finished one is reused.
"""

from __future__ import annotations

from t2g_core.config.stages import WarmupSettings
from t2g_core.stages.context import StageContext
from t2g_core.stages.holdout import training_rows
from t2g_core.stages.refs import ArtifactRef, ModelsRef, model_digest
from t2g_core.warmup import train_warmup, warmup_pairs


def warm_up(feedback: ArtifactRef, models: ModelsRef, settings: WarmupSettings, ctx: StageContext) -> ModelsRef:
    """LoRA SFT of ``models.policy`` on the training prompts' references, merged; ``models`` with that policy (in
    every process of a launch: they train together, rank 0 writes)."""
    from t2g_core.models.loading import load_tokenizer, resolve_dtype

    cfg = settings.warmup
    pairs = warmup_pairs(training_rows(feedback, settings), load_tokenizer(models.policy, padding_side=None), cfg)
    ctx.log(
        f"warm-up: {len(pairs.pairs)} (prompt, reference) pairs from the training prompts "
        f"({pairs.no_reference} without a reference, {pairs.too_long} above warmup.max_length), {cfg.steps} steps"
    )
    with ctx.own_folder("checkpoints/warmup", fresh=True) as run_dir:  # a second writer fails, naming the holder
        dtype = resolve_dtype(settings.models.dtype)
        result = train_warmup(
            cfg, models.policy, pairs, run_dir, dtype=dtype, tracker=ctx.tracker, on_progress=ctx.on_progress
        )
    how = f", resumed from {result.resumed_from}" if result.resumed_from else ""
    loss = f", loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}" if result.losses else ""
    ctx.log(f"warm-up: {result.global_step} steps in {result.train_seconds:.1f} s{how}{loss} -> {result.policy_dir}")
    ctx.tracker.log_metrics({"warmup.seconds": result.train_seconds, "warmup.pairs": float(result.n_pairs)})
    policy = str(result.policy_dir)
    return models.model_copy(update={"policy": policy, "policy_digest": model_digest(policy), "run_id": None})
