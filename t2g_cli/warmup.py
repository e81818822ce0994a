"""``t2g warmup``: the policy's supervised warm-up on the training prompts' references, before PPO."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, echo, fail, guard, pipeline_config, stage_context
from t2g_core.config.stages import FeedbackSettings, ModelsSettings, WarmupSettings
from t2g_core.stages import feedback, models, warmup
from t2g_core.stages.refs import SourceRef


def prepared(cfg, *, warm_up: bool):
    """The feedback and the models of ``cfg`` (built once per key, like the pipeline's stages); with ``warm_up``, the
    models' policy is the warmed-up one (``warmup`` settings, keyed and reused like the pipeline's stage)."""
    ws = cfg.workspace.root
    source, data = SourceRef.of(cfg.data), FeedbackSettings.from_pipeline(cfg)
    built_with = ModelsSettings.from_pipeline(cfg)
    fb = feedback.materialise(source, data, stage_context("feedback", ws, {"source": source, "settings": data}))
    built = models.build(fb, built_with, stage_context("models", ws, {"feedback": fb, "settings": built_with}))
    if not warm_up:
        return fb, built
    # the warm-up runs: keyed as the pipeline keys it with warmup.enabled, so `t2g warmup` and `t2g ppo train` share it
    settings = WarmupSettings(
        warmup=cfg.warmup.model_copy(update={"enabled": True}), holdout=cfg.holdout, models=cfg.models
    )
    ctx = stage_context("warmup", ws, {"feedback": fb, "models": built, "settings": settings})
    return fb, warmup.warm_up(fb, built, settings, ctx)


@guard
def warmup_cmd(
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Fine-tune the policy (LoRA, merged) on the references of the training prompts (the held-out split excluded),
    whatever warmup.enabled says; a finished warm-up with the same inputs is reused, a killed one resumes. PPO
    starts from it with warmup.enabled=true (`t2g run`, `t2g ppo train`)."""
    cfg = pipeline_config(config, set_)
    try:
        _, warmed = prepared(cfg, warm_up=True)
    except ValueError as exc:
        fail(str(exc))
    echo(f"warmed-up policy: {warmed.policy}")


def register(app: typer.Typer) -> None:
    app.command("warmup")(warmup_cmd)
