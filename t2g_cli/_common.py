"""Shared CLI helpers: config loading with overrides and friendly errors."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from t2g_core.codehash import code_digest
from t2g_core.config import ConfigFileError, PipelineConfig, load_config
from t2g_core.config.hints import did_you_mean
from t2g_core.disk import DiskFull, disk_full
from t2g_core.progress import TqdmProgress, no_progress
from t2g_core.schemas import SchemaError
from t2g_core.stages.context import StageContext, stage_key
from t2g_core.store import MANIFEST, ArtifactRef
from t2g_core.tracking import NullTracker

console = Console(stderr=False)
err_console = Console(stderr=True)

ConfigOpt = typer.Option(None, "--config", "-c", help="PipelineConfig YAML file (defaults embedded).")
SetOpt = typer.Option(None, "--set", "-s", help="Override a config field, e.g. --set ppo.steps=10 (repeatable).")


RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def pipeline_config(config: Path | None, overrides: list[str] | None, preset: str | None = None) -> PipelineConfig:
    try:
        return load_config(config, overrides or [], preset)
    except ValidationError as exc:
        where = f"{config}: " if config else ""
        fail(f"invalid configuration: {where}{one_line(exc, PipelineConfig)}")
    except ConfigFileError as exc:
        fail(f"invalid configuration: {exc}{recipe_hint() if config is not None and not config.exists() else ''}")
    except ValueError as exc:
        fail(f"invalid configuration: {exc}")


def recipe_hint(folder: Path = RECIPES) -> str:
    """``; recipes: recipes/a.yaml, ...`` (the project's own recipe files), or nothing when there are none."""
    found = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    return f"; recipes in {folder}: {', '.join(p.name for p in found)}" if found else ""


def one_line(exc: ValidationError, model: type | None = None) -> str:
    """Every problem of a pydantic validation error on one line: ``ppo.stepz: Extra inputs are not permitted``, with
    the closest field name of ``model`` when a key is unknown (``did you mean ppo.steps?``)."""
    parts = []
    for e in exc.errors():
        msg = e["msg"].removeprefix("Value error, ")
        text = f"{'.'.join(str(p) for p in e['loc'])}: {msg}" if e["loc"] else msg
        guess = did_you_mean(model, e["loc"]) if model is not None and e["type"] == "extra_forbidden" else None
        parts.append(f"{text} (did you mean {guess}?)" if guess else text)
    return "; ".join(parts)


def fail(message: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def guard(fn):
    """Turn SchemaError, and a full disk in any disguise (``t2g_core.disk``), into one clear line and a non-zero exit
    instead of a traceback."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SchemaError as exc:
            fail(str(exc))
        except typer.Exit:  # a command that already said why it ends (its context may be the very disk error)
            raise
        except Exception as exc:
            full = exc if isinstance(exc, DiskFull) else disk_full(exc, Path.cwd())
            if full is None:
                raise
            fail(str(full))

    return wrapper


def echo(msg: str) -> None:
    console.print(msg, soft_wrap=True, highlight=False, markup=False)
    sys.stdout.flush()


class EchoTracker(NullTracker):
    """The command line's tracker: prints the reward model's training loss now and then; the rest is not tracked."""

    def __init__(self, every: int = 10):
        self.every, self.n = every, 0

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if "rm/loss" in metrics:
            self.n += 1
            if self.n % self.every == 1:
                echo(f"  step {step}: loss {metrics['rm/loss']:.4f}")


def join_processes(world: int | None = None):
    """Under ``accelerate launch`` / torchrun, join the process group before any stage runs (gloo without CUDA,
    NCCL with it); alone, set up one process. The library then reads the same state (``t2g_core.ppo.distributed``).
    Returns accelerate's ``PartialState`` (``main_process_first()``: rank 0 prepares shared inputs, the rest reuse).
    Refused (exit 2) when accelerate runs fewer processes than ``world`` (default: torchrun's ``WORLD_SIZE``): on a
    host without CUDA ``PartialState()`` without ``cpu=True`` leaves each process alone, and ``--cpu`` starts one."""
    import os

    from accelerate import PartialState

    from t2g_core.ppo.distributed import use_cpu

    state = PartialState(cpu=use_cpu())
    world = world or int(os.environ.get("WORLD_SIZE", "1"))
    if state.num_processes != world:
        fail(
            f"accelerate runs this process as 1 of {state.num_processes} ({state.distributed_type.name}) where the "
            f"launch asked for {world}: on a host without CUDA start it without --cpu / use_cpu (gloo processes "
            "need a multi-process config such as deployments/accelerate/ddp.yaml) and join with cpu=True"
        )
    return state


def stage_context(stage: str, workspace: Path | str, params: dict, out: Path | None = None, *, progress: bool = True):
    """The context a command runs stage ``stage`` in: its key from the stage's code and ``params``; outputs at
    ``out`` (a file or folder the user named) or key-addressed in ``workspace``; progress bars when ``progress``."""
    key = stage_key(stage, code_digest(f"t2g_core.stages.{stage}"), params)
    bars = TqdmProgress() if progress else no_progress
    kwargs = {"tracker": EchoTracker(), "log": echo, "progress": progress, "on_progress": bars}
    if out is None:
        return StageContext.keyed(workspace, key, **kwargs)
    return StageContext.at_path(workspace, key, out, **kwargs)


def artifact(path: Path, schema: str):
    """A reference to an artifact folder or data file named on the command line (exit 2 when it does not exist)."""
    if not path.exists():
        fail(f"{path}: no such file or folder")
    return ArtifactRef.of(path, schema)


def read_extra(ref) -> dict:
    """What a stage recorded beside its output (statistics, metrics): the artifact's manifest, or the files
    ``<stem>.<name>.json`` beside a plain output file."""
    import json

    path = Path(ref.path)
    if (path / MANIFEST).is_file():
        return json.loads((path / MANIFEST).read_text(encoding="utf-8")).get("extra", {})
    return {
        f.name.removeprefix(path.stem + ".").removesuffix(".json"): json.loads(f.read_text(encoding="utf-8"))
        for f in path.parent.glob(f"{path.stem}.*.json")
    }
