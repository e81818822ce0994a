"""``t2g config``: show the effective configuration or its JSON schema."""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml

from t2g_cli._common import ConfigOpt, SetOpt, echo, fail, pipeline_config
from t2g_core.config import PipelineConfig
from t2g_core.config.stages import NOT_STAGE_INPUTS
from t2g_core.stages.registry import STAGES

config_app = typer.Typer(help="Show and check pipeline configuration.", no_args_is_help=True)


@config_app.command("show")
def show(
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    preset: str | None = typer.Option(None, "--preset", "-p", help="Size preset: tiny, small or full."),
    section: str | None = typer.Option(
        None, "--section", help="Only this section (a top-level key such as ppo, or a dotted path: ppo.sampling)."
    ),
) -> None:
    """Print the effective PipelineConfig (defaults + YAML + --set overrides) as YAML."""
    cfg = pipeline_config(config, set_, preset)
    data = cfg.model_dump(mode="json", by_alias=True)
    for key in (section or "").split(".") if section else []:
        if not isinstance(data, dict) or key not in data:
            where = sorted(data) if isinstance(data, dict) else []
            fail(f"no section {section!r}; sections here: {', '.join(where) or '(none: a plain value)'}")
        data = data[key]
    echo(yaml.safe_dump(data if isinstance(data, dict) else {section: data}, sort_keys=False))


@config_app.command("schema")
def schema() -> None:
    """Print the JSON schema of PipelineConfig (what the Prefect UI renders as the run form)."""
    echo(json.dumps(PipelineConfig.model_json_schema(by_alias=True), indent=2))


@config_app.command("stages")
def stages() -> None:
    """Print which configuration sections each stage reads (its cache key); the others re-run nothing."""
    for stage in STAGES:
        also = "".join(f" + {extra}" for extra in stage.settings.ALSO_READS)
        echo(f"{stage.name:<14} {', '.join(stage.sections)}{also}")
    echo(f"{'(none)':<14} {', '.join(NOT_STAGE_INPUTS)}: read by the orchestration only")


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
