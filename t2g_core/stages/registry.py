"""The pipeline's stages, once: every stage list in the project is derived from this table or checked against it.

- ``name``: what a user types or reads (``--refresh``, ``timeouts.<name>``, task, folders, MLflow run, summary);
- ``settings``: the ``PipelineConfig`` sections it reads (its settings model, so its cache key);
- ``output``: the reference type it returns; ``group``: the flow that runs it (``placement.<group>``);
- ``optional``: off unless ``<name>.enabled``; ``system_metrics``: its MLflow run records CPU / GPU / memory;
- ``gang``: its function runs in every process of an ``accelerate`` launch, rank 0 writing (``layout.<name>``).

A new stage is a row here, its function in ``t2g_core.stages``, its task in ``tasks/``, its settings model in
``t2g_core.config``; ``StageName`` and ``Group`` are checked against this table on import.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from t2g_core.config import PipelineConfig, orchestration
from t2g_core.config import stages as settings
from t2g_core.stages import refs


@dataclass(frozen=True)
class Stage:
    name: str
    settings: type[settings.StageSettings]
    output: Any
    group: str
    optional: bool = False
    system_metrics: bool = False
    gang: bool = False

    @property
    def sections(self) -> tuple[str, ...]:
        return self.settings.sections()


STAGES: tuple[Stage, ...] = (
    Stage("feedback", settings.FeedbackSettings, refs.ArtifactRef, "feedback"),
    Stage("models", settings.ModelsSettings, refs.ModelsRef, "models", system_metrics=True),
    Stage("annotate", settings.AnnotateSettings, refs.ArtifactRef, "annotate"),
    Stage("align", settings.AlignSettings, refs.ArtifactRef, "align_and_validate"),
    Stage("validate", settings.ValidateSettings, refs.ValidationRef, "align_and_validate"),
    Stage("warmup", settings.WarmupSettings, refs.ModelsRef, "warmup", optional=True, system_metrics=True, gang=True),
    Stage(
        "policy_samples",
        settings.PolicySamplesSettings,
        refs.PolicySamplesRef,
        "policy_samples",
        optional=True,
        system_metrics=True,
    ),
    Stage(
        "reward_model",
        settings.RewardModelSettings,
        refs.RewardModelRef,
        "reward_model",
        system_metrics=True,
        gang=True,
    ),
    Stage("ppo", settings.PPOSettings, refs.PolicyRef, "ppo", system_metrics=True, gang=True),
    Stage("evaluate", settings.EvaluateSettings, refs.EvaluationRef, "evaluate", system_metrics=True),
)
BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
ORDER: tuple[str, ...] = tuple(BY_NAME)
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(s.group for s in STAGES))
INLINE_GROUPS = ("feedback", "models")  # run in the pipeline's own process: they are quick or read local files
PLACEABLE: tuple[str, ...] = tuple(g for g in GROUPS if g not in INLINE_GROUPS)
STAGE_SECTIONS: dict[str, tuple[str, ...]] = {s.name: s.sections for s in STAGES}
SYSTEM_METRICS: frozenset[str] = frozenset(s.name for s in STAGES if s.system_metrics)
GANG: tuple[str, ...] = tuple(s.name for s in STAGES if s.gang)

_NAMES = {"StageName": ORDER, "Group": PLACEABLE, "GangStage": GANG}
if any(names != typing.get_args(getattr(orchestration, kind)) for kind, names in _NAMES.items()):
    raise ImportError(f"t2g_core.config.orchestration's {', '.join(_NAMES)} disagree with the stage table: {_NAMES}")


def settings_for(stage: str, cfg: PipelineConfig) -> Any:
    """The settings of ``stage`` taken from ``cfg``."""
    return BY_NAME[stage].settings.from_pipeline(cfg)


def downstream(refresh: list[str] | None) -> set[str]:
    """Refreshing a stage re-runs it and every stage after it (their inputs are about to change)."""
    if not refresh:
        return set()
    unknown = set(refresh) - set(ORDER)
    if unknown:
        raise ValueError(f"unknown stage(s) to refresh: {sorted(unknown)}; choose from {', '.join(ORDER)}")
    first = min(ORDER.index(s) for s in refresh)
    return set(ORDER[first:])


def typed_outputs(outputs: dict[str, Any]) -> dict[str, Any]:
    """Every stage output as its reference type: a stage group reused on a Retry hands back its stored JSON."""
    from pydantic import TypeAdapter

    return {
        name: TypeAdapter(BY_NAME[name].output | None).validate_python(ref)
        if isinstance(ref, dict) and name in BY_NAME
        else ref
        for name, ref in outputs.items()
    }
