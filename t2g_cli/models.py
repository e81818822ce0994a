"""``t2g models``: build the tiny local models (tokenizer, base LM, warm-started policy) into a workspace."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, echo, guard, pipeline_config

models_app = typer.Typer(help="Tiny local models built from the demo corpus.", no_args_is_help=True)


@models_app.command("build")
@guard
def build(
    workspace: Path = typer.Option(Path("t2g-workspace"), help="Workspace folder (models go to <workspace>/models)."),
    feedback: Path | None = typer.Option(
        None, help="Feedback file to build the corpus from (default: the config's data)."
    ),
    threads: int = typer.Option(2, min=1, help="Torch CPU threads."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Build the tiny base LM and the warm-started policy once (reused when config and data are unchanged)."""
    import time

    import torch

    from t2g_core.demo import make_demo_feedback
    from t2g_core.feedback import load_feedback
    from t2g_core.models.tiny import ensure_demo_models
    from t2g_core.workspace import Workspace

    cfg = pipeline_config(config, set_)
    torch.set_num_threads(threads)
    if feedback is not None:
        df = load_feedback(feedback)
    elif cfg.data.source == "demo":
        df = make_demo_feedback(cfg.data.task, cfg.data.n_items, cfg.data.seed)
    else:
        df = load_feedback(cfg.data.source)
    t0 = time.perf_counter()
    built = ensure_demo_models(Workspace.at(workspace).models, cfg.models, df, log=echo)
    echo(f"base:   {built.base}\npolicy: {built.policy}\n({time.perf_counter() - t0:.1f} s)")


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
