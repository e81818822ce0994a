"""``t2g ppo``: span-reward PPO (train a run, resume a run)."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, echo, fail, guard, pipeline_config

ppo_app = typer.Typer(
    help="Span-reward PPO: token-level rewards from critiques (span), or scalar / dense baselines.",
    no_args_is_help=True,
)


def _init_distributed() -> None:
    """Under ``accelerate launch`` / torchrun this joins the process group (gloo on CPU); alone it does nothing."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from accelerate import PartialState

        PartialState()


def _feedback(cfg):
    if cfg.data.source == "demo":
        from t2g_core.demo import make_demo_feedback

        return make_demo_feedback(cfg.data.task, cfg.data.n_items, cfg.data.seed)
    from t2g_core.feedback import load_feedback

    return load_feedback(cfg.data.source)


def _summary(result) -> None:
    last = result.history[-1] if result.history else {}
    keys = ("reward/span_mean", "kl/mean", "task/error", "eval/task_error", "parse/failure_rate")
    echo(" ".join(f"{k}={last[k]:.4f}" for k in keys if k in last))
    echo(f"adapter: {result.adapter_dir}\nrun: {result.run_dir} (resume with: t2g ppo resume {result.run_dir})")


@ppo_app.command("train")
@guard
def train_cmd(
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    run_dir: Path | None = typer.Option(
        None, "--run-dir", help="Run folder (default <workspace>/checkpoints/ppo/<mode>-<source>-seed<seed>)."
    ),
) -> None:
    """Train a LoRA policy with PPO from the configured data, policy and reward source."""
    from t2g_core.models.tiny import ensure_demo_models
    from t2g_core.ppo.run import default_run_name, prepare_run, run_from_dir
    from t2g_core.workspace import Workspace

    cfg = pipeline_config(config, set_)
    _init_distributed()
    ws = Workspace.at(cfg.workspace.root)
    feedback = _feedback(cfg)
    policy = ensure_demo_models(ws.models, cfg.models, feedback, log=echo).policy
    out = run_dir or ws.checkpoints / "ppo" / default_run_name(cfg)
    if (out / "checkpoints" / "latest").exists():
        fail(f"{out} already holds a run; continue it with `t2g ppo resume {out}` or pass another --run-dir")
    prepare_run(cfg, out, feedback, policy, cfg.ppo.reward_model_path)
    echo(f"PPO ({cfg.ppo.reward_mode}, {cfg.ppo.reward_source}) from {policy} -> {out}")
    try:
        _summary(run_from_dir(out, resume=False))
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))


@ppo_app.command("resume")
@guard
def resume_cmd(run_dir: Path = typer.Argument(..., help="A run folder written by `t2g ppo train`.")) -> None:
    """Continue a run from its latest checkpoint, exactly as if it had not stopped."""
    from t2g_core.ppo.run import run_from_dir

    _init_distributed()
    try:
        _summary(run_from_dir(run_dir, resume=True))
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))


def register(app: typer.Typer) -> None:
    app.add_typer(ppo_app, name="ppo")
