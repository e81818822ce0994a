"""Typed configuration: one frozen pydantic model per stage, composed into PipelineConfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, model_validator

from t2g_core.config.align import AlignConfig
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.config.base import StageConfig, recipe_path
from t2g_core.config.checks import ChecksConfig, conflicts
from t2g_core.config.data import DataConfig, HoldoutConfig, Task
from t2g_core.config.evaluate import EvaluateConfig
from t2g_core.config.models import ModelsConfig
from t2g_core.config.orchestration import LayoutConfig, PlacementConfig, TimeoutsConfig
from t2g_core.config.policy_samples import PolicySamplesConfig
from t2g_core.config.ppo import PPOConfig
from t2g_core.config.presets import PRESETS, Preset, merged
from t2g_core.config.reward_model import RewardModelConfig
from t2g_core.config.validate import ValidateConfig
from t2g_core.config.warmup import WarmupConfig
from t2g_core.config.workspace import WorkspaceConfig

__all__ = [
    "AlignConfig",
    "AnnotateConfig",
    "ChecksConfig",
    "ConfigFileError",
    "DataConfig",
    "EvaluateConfig",
    "ModelsConfig",
    "PPOConfig",
    "PipelineConfig",
    "PlacementConfig",
    "PolicySamplesConfig",
    "Preset",
    "RewardModelConfig",
    "HoldoutConfig",
    "StageConfig",
    "Task",
    "TimeoutsConfig",
    "ValidateConfig",
    "WarmupConfig",
    "WorkspaceConfig",
    "apply_overrides",
    "load_config",
    "recipe_path",
    "resolve_recipe_paths",
]


def _section(factory: type, title: str, description: str, **kw: Any) -> Any:
    return Field(default_factory=factory, title=title, description=description, **kw)


def _in_field_order(schema: dict[str, Any]) -> None:
    """The run form shows the sections in the order the fields are declared (Prefect orders by ``position``)."""
    for position, field in enumerate(schema.get("properties", {}).values()):
        field["position"] = position


class PipelineConfig(StageConfig):
    """The whole pipeline; each field is one stage's config, in the order the stages run."""

    data: DataConfig = _section(DataConfig, "1 · Data (feedback)", "Feedback to learn from.")
    holdout: HoldoutConfig = _section(
        HoldoutConfig, "2 · Held-out prompts", "Prompts held out from PPO for evaluation."
    )
    models: ModelsConfig = _section(ModelsConfig, "3 · Models", "Base models.")
    annotate: AnnotateConfig = _section(AnnotateConfig, "4 · Annotate", "Annotation stage.")
    align: AlignConfig = _section(AlignConfig, "5 · Align spans", "Span alignment stage.")
    validate_: ValidateConfig = _section(
        ValidateConfig, "6 · Validate", "Validation gates and review.", alias="validate"
    )
    warmup: WarmupConfig = _section(
        WarmupConfig, "7 · Warm-up (optional)", "Supervised warm-up of the policy before PPO (off by default)."
    )
    policy_samples: PolicySamplesConfig = _section(
        PolicySamplesConfig, "8 · Policy samples (optional)", "The reward model's data from the policy PPO starts from."
    )
    reward_model: RewardModelConfig = _section(
        RewardModelConfig, "9 · Reward model", "The reward model PPO learns from."
    )
    ppo: PPOConfig = _section(PPOConfig, "10 · PPO", "Span-reward PPO.")
    evaluate: EvaluateConfig = _section(EvaluateConfig, "11 · Evaluate", "Policy evaluation.")
    placement: PlacementConfig = _section(
        PlacementConfig,
        "Placement (work pools)",
        "Work pool of each stage group, e.g. {ppo: t2g-gpu} (others: inline).",
    )
    layout: LayoutConfig = _section(
        LayoutConfig, "Processes (training stages)", "Processes a training stage runs as, e.g. {ppo: {processes: 8}}."
    )
    timeouts: TimeoutsConfig = _section(
        TimeoutsConfig, "Time limits", "Minutes each named stage may run, e.g. {ppo: 120} (none unless named)."
    )
    workspace: WorkspaceConfig = _section(WorkspaceConfig, "Workspace and tracking", "Workspace and tracking.")
    checks: ChecksConfig = _section(
        ChecksConfig, "Checks (accepted risks)", "Combinations of settings accepted although they are risky."
    )

    model_config = StageConfig.model_config | {"populate_by_name": True, "json_schema_extra": _in_field_order}

    @model_validator(mode="after")
    def _settings_work_together(self) -> PipelineConfig:
        problems = conflicts(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML) to a nested dict, returning a new dict."""
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(data)) or {}
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not of the form key.path=value")
        dotted, raw = item.split("=", 1)
        node = out
        keys = dotted.strip().split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {key!r} is not a section")
        try:
            node[keys[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ValueError(
                f"override {item!r}: the value is not valid YAML ({getattr(exc, 'problem', exc)})"
            ) from None
    return out


class ConfigFileError(ValueError):
    """A configuration file that is missing or not valid YAML: the message names the file (and line)."""


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: no such configuration file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: cannot be read ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigFileError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: the top level must be a mapping of stage names")
    return data


def _recipe_relative(value: str, folder: Path, keywords: list[str]) -> str:
    if value in keywords or Path(value).is_absolute() or "://" in value:
        return value
    candidate = folder / value
    if candidate.exists() or value.startswith(("./", "../")):
        return str(candidate.resolve())
    return value  # a Hugging Face id, or a path relative to the current folder (recipes written before this rule)


def resolve_recipe_paths(data: dict[str, Any], folder: Path, model: type[StageConfig] = PipelineConfig) -> dict:
    """``data`` (a recipe's YAML) with each relative input path resolved against the recipe's ``folder``: the fields
    marked with :func:`recipe_path` (data.source, models.policy, models.reward_model_base, ppo.reward_model_path)."""
    out = dict(data)
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = out.get(key)
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if isinstance(value, dict) and isinstance(field.annotation, type) and issubclass(field.annotation, StageConfig):
            out[key] = resolve_recipe_paths(value, folder, field.annotation)
        elif isinstance(value, str) and "recipe_path" in extra:
            out[key] = _recipe_relative(value, folder, list(extra["recipe_path"]))
    return out


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, preset: Preset | None = None
) -> PipelineConfig:
    """Load a PipelineConfig: the ``preset`` (``t2g_core.config.presets``), then the YAML file, then the CLI
    overrides; errors name the bad field. Relative input paths in the file are relative to the file's folder; those
    in overrides to the current folder."""
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"no preset {preset!r}; presets: {', '.join(PRESETS)}")
    data: dict[str, Any] = dict(PRESETS[preset]) if preset else {}
    if path is not None:
        data = merged(data, resolve_recipe_paths(_read_yaml(Path(path)), Path(path).resolve().parent))
    return PipelineConfig.model_validate(apply_overrides(data, overrides or []))
