"""``t2g models``: build the tiny local models (tokenizer, base LM, warm-started policy) into a workspace."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, artifact, echo, guard, pipeline_config, stage_context

models_app = typer.Typer(help="Tiny local models built from the demo corpus.", no_args_is_help=True)


@models_app.command("build")
@guard
def build(
    workspace: Path = typer.Option(Path("t2g-workspace"), help="Workspace folder (models go to <workspace>/models)."),
    feedback: Path | None = typer.Option(
        None, help="Feedback file to build the corpus from (default: the config's data, stored in the workspace)."
    ),
    threads: int = typer.Option(2, min=1, help="Torch CPU threads."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Build the tiny base LM and the warm-started policy once (reused when config, data and code are unchanged)."""
    import time

    import torch

    from t2g_core.config.stages import FeedbackSettings, ModelsSettings
    from t2g_core.stages import feedback as feedback_stage
    from t2g_core.stages import models
    from t2g_core.stages.refs import SourceRef

    cfg = pipeline_config(config, set_)
    torch.set_num_threads(threads)
    if feedback is not None:
        fb = artifact(feedback, "feedback")
    else:
        source, data = SourceRef.of(cfg.data), FeedbackSettings.from_pipeline(cfg)
        fb = feedback_stage.materialise(
            source, data, stage_context("feedback", workspace, {"source": source, "settings": data})
        )
    settings = ModelsSettings.from_pipeline(cfg)
    t0 = time.perf_counter()
    built = models.build(fb, settings, stage_context("models", workspace, {"feedback": fb, "settings": settings}))
    echo(f"base:   {built.base}\npolicy: {built.policy}\n({time.perf_counter() - t0:.1f} s)")


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
