"""A PPO run folder: everything needed to start, inspect and resume a run from the command line or a task.

``<run_dir>/run.json`` records the settings PPO reads (``ppo``, ``holdout``, ``align``, ``reward_model``, ``models``
and, with the critique loop on, ``annotate`` sections), the policy folder and the reward-model path;
``prompts.parquet`` and ``eval.parquet`` (feedback schema) hold the exact prompts; with the critique loop on,
``critique_loop/`` holds the reward model's training rows it replays. ``t2g ppo resume RUN_DIR`` needs nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from t2g_core.config.stages import PPOSettings
from t2g_core.feedback import split_prompts
from t2g_core.models.loading import default_device, resolve_dtype
from t2g_core.ppo.distributed import barrier, rank_and_world
from t2g_core.ppo.hooks import StepHook
from t2g_core.ppo.sources import make_reward_source, task_metric_for
from t2g_core.ppo.trainer import PPOResult, train
from t2g_core.progress import Progress, no_progress
from t2g_core.schemas import FEEDBACK
from t2g_core.store import read_json, write_parquet, write_text_atomic
from t2g_core.tracking import Tracker

RUN_FILE = "run.json"


def default_run_name(cfg: PPOSettings) -> str:
    p = cfg.ppo
    return f"{p.reward_mode}-{p.reward_source}-seed{p.seed}"


def prepare_run(
    cfg: PPOSettings,
    run_dir: str | Path,
    feedback: pd.DataFrame,
    policy_dir: str | Path,
    reward_model_path: str | Path | None = None,
) -> Path:
    """Write run.json and the prompt split into ``run_dir`` (rank 0; others wait)."""
    run_dir = Path(run_dir)
    if rank_and_world()[0] == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        train_df, eval_df = split_prompts(feedback, cfg.holdout)
        write_parquet(train_df, run_dir / "prompts.parquet", FEEDBACK)
        if eval_df is not None:
            write_parquet(eval_df, run_dir / "eval.parquet", FEEDBACK)
        spec = {
            "config": cfg.model_dump(mode="json", by_alias=True),
            "policy_dir": str(Path(policy_dir).resolve()) if Path(policy_dir).exists() else str(policy_dir),
            "reward_model_path": str(reward_model_path) if reward_model_path else None,
        }
        write_text_atomic(run_dir / RUN_FILE, json.dumps(spec, indent=2))
    barrier()
    return run_dir


def run_from_dir(
    run_dir: str | Path,
    *,
    resume: bool,
    tracker: Tracker | None = None,
    api_key: str | None = None,
    progress: Progress = no_progress,
    hook: Callable[..., StepHook] | None = None,
) -> PPOResult:
    """Train (or resume) the run described by ``run_dir/run.json``; ``api_key`` (never stored) serves an HTTP reward
    source. ``hook(settings, run_dir, reward_model_path, prompts, reward_source, dtype)`` builds the step hook."""
    run_dir = Path(run_dir)
    spec = _read_spec(run_dir)
    cfg = load_settings(spec["config"])
    dtype = resolve_dtype(cfg.models.dtype, default_device())  # once, for this process's device: every model below
    prompts = pd.read_parquet(run_dir / "prompts.parquet")
    eval_df = pd.read_parquet(run_dir / "eval.parquet") if (run_dir / "eval.parquet").exists() else None
    task = str(prompts["task"].mode().iloc[0])
    path = spec.get("reward_model_path")
    source = make_reward_source(
        cfg.ppo.reward_source,
        task,
        reward_model_path=path,
        rm_cfg=cfg.reward_model,
        api_key=api_key,
        cache_dir=run_dir / "answers",
        dtype=dtype,
    )
    made = hook(cfg, run_dir, path, prompts, source, dtype) if hook is not None else None
    return train(
        cfg.ppo,
        spec["policy_dir"],
        prompts,
        run_dir,
        reward_source=source,
        eval_df=eval_df,
        tracker=tracker,
        resume=resume,
        align_cfg=cfg.align,
        task_metric=task_metric_for(task, prompts),
        dtype=dtype,
        progress=progress,
        hook=made,
    )


def read_settings(run_dir: str | Path) -> PPOSettings:
    """The settings of the run in ``run_dir`` (from its run.json)."""
    return load_settings(_read_spec(Path(run_dir))["config"])


def _read_spec(run_dir: Path) -> dict:
    spec_file = run_dir / RUN_FILE
    if not spec_file.exists():
        raise FileNotFoundError(f"{spec_file}: not a PPO run folder (no {RUN_FILE})")
    return read_json(spec_file)


def load_settings(config: dict) -> PPOSettings:
    """The PPO settings recorded in a run folder (older run folders recorded the whole pipeline config); a recorded
    ``reward_model.precision``, not a setting and never read by PPO, is dropped so such a run still resumes."""
    sections = {k: v for k, v in config.items() if k in PPOSettings.sections()}
    if isinstance(sections.get("reward_model"), dict):
        sections["reward_model"] = {k: v for k, v in sections["reward_model"].items() if k != "precision"}
    return PPOSettings.model_validate(sections)
