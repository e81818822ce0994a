"""Shared CLI helpers: config loading with overrides and friendly errors."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from t2g_core.config import PipelineConfig, load_config
from t2g_core.schemas import SchemaError

console = Console(stderr=False)
err_console = Console(stderr=True)

ConfigOpt = typer.Option(None, "--config", "-c", help="PipelineConfig YAML file (defaults embedded).")
SetOpt = typer.Option(None, "--set", "-s", help="Override a config field, e.g. --set ppo.steps=10 (repeatable).")


def pipeline_config(config: Path | None, overrides: list[str] | None) -> PipelineConfig:
    try:
        return load_config(config, overrides or [])
    except (ValidationError, ValueError) as exc:
        fail(f"invalid configuration: {exc}")


def fail(message: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def guard(fn):
    """Turn SchemaError into one clear line and a non-zero exit instead of a traceback."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SchemaError as exc:
            fail(str(exc))

    return wrapper


def echo(msg: str) -> None:
    console.print(msg, soft_wrap=True, highlight=False, markup=False)
    sys.stdout.flush()
