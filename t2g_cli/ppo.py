"""``t2g ppo``: span-reward PPO (train a run, resume a run)."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, echo, fail, guard, join_processes, pipeline_config, stage_context
from t2g_cli.warmup import prepared
from t2g_core.config.stages import PPOSettings
from t2g_core.stages import ppo
from t2g_env import api_key

ppo_app = typer.Typer(
    help="Span-reward PPO: token-level rewards from critiques (span), or the scalar / uniform / dense (word-level) "
    "baselines.",
    no_args_is_help=True,
)


def _summary(ref) -> None:
    keys = ("reward/span_mean", "kl/mean", "task/error", "eval/task_error", "parse/failure_rate")
    echo(" ".join(f"{k}={ref.metrics[k]:.4f}" for k in keys if k in ref.metrics))
    echo(f"adapter: {ref.adapter_dir}\nrun: {ref.run_dir} (resume with: t2g ppo resume {ref.run_dir})")


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
    from t2g_core.ppo.run import default_run_name

    cfg = pipeline_config(config, set_)
    processes = join_processes()
    ws = cfg.workspace.root
    settings = PPOSettings.from_pipeline(cfg)
    out = run_dir or Path(ws).resolve() / "checkpoints" / "ppo" / default_run_name(settings)
    if (out / "checkpoints" / "latest").exists():
        fail(f"{out} already holds a run; continue it with `t2g ppo resume {out}` or pass another --run-dir")
    with processes.main_process_first():  # one process ingests and builds; the others find the results
        prepared(cfg, warm_up=False)
    fb, built = prepared(cfg, warm_up=cfg.warmup.enabled)  # the warm-up trains in every process
    echo(f"PPO ({cfg.ppo.reward_mode}, {cfg.ppo.reward_source}) from {built.policy} -> {out}")
    params = {"feedback": fb, "models": built, "settings": settings}
    try:
        ctx = stage_context("ppo", ws, params, out)
        _summary(ppo.train(fb, built, None, settings, ctx, api_key=api_key(settings)))
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))


@ppo_app.command("resume")
@guard
def resume_cmd(run_dir: Path = typer.Argument(..., help="A run folder written by `t2g ppo train`.")) -> None:
    """Continue a run from its latest checkpoint, exactly as if it had not stopped."""
    from t2g_core.ppo.run import read_settings

    join_processes()
    try:
        ctx = stage_context("ppo", run_dir.parent, {"run_dir": str(run_dir)}, run_dir)
        _summary(ppo.resume(run_dir, ctx, api_key=api_key(read_settings(run_dir))))
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))


def register(app: typer.Typer) -> None:
    app.add_typer(ppo_app, name="ppo")
