"""How long each stage task may run before the orchestration stops it: no limit unless one is set.

Read by the orchestration only (like ``placement``), so a changed limit re-runs nothing. A stage stopped by its limit
keeps what it finished: the training stages (model build, reward model, PPO) resume from their last checkpoint on
the next run, annotation from its answer cache.
"""

from __future__ import annotations

from pydantic import Field

from t2g_core.config.base import StageConfig

LIMIT = (
    "Minutes the {what} may run before it is stopped (None = no limit). A stopped stage resumes on the next run{how}."
)


class TimeoutsConfig(StageConfig):
    feedback: float | None = Field(
        None, gt=0, description=LIMIT.format(what="feedback stage (reading the source)", how="")
    )
    models: float | None = Field(
        None, gt=0, description=LIMIT.format(what="model build (tiny models)", how=" from its last checkpoint")
    )
    annotate: float | None = Field(
        None, gt=0, description=LIMIT.format(what="annotation stage", how=" (LLM answers already received are cached)")
    )
    align: float | None = Field(None, gt=0, description=LIMIT.format(what="alignment stage", how=""))
    validate_: float | None = Field(
        None, gt=0, alias="validate", description=LIMIT.format(what="each validation task", how="")
    )
    reward_model: float | None = Field(
        None, gt=0, description=LIMIT.format(what="reward-model training", how=" from its last checkpoint")
    )
    warmup: float | None = Field(
        None, gt=0, description=LIMIT.format(what="supervised warm-up", how=" from its last checkpoint")
    )
    policy_samples: float | None = Field(
        None,
        gt=0,
        description=LIMIT.format(
            what="policy-samples stage", how=" (the annotator's answers already received are cached)"
        ),
    )
    ppo: float | None = Field(None, gt=0, description=LIMIT.format(what="PPO stage", how=" from its last checkpoint"))
    evaluate: float | None = Field(None, gt=0, description=LIMIT.format(what="policy evaluation", how=""))

    model_config = StageConfig.model_config | {"populate_by_name": True}

    def seconds(self, stage: str) -> float | None:
        """The limit of ``stage`` (a stage name of ``t2g_core.config.stages``) in seconds, or None."""
        minutes = getattr(self, "validate_" if stage == "validate" else stage)
        return None if minutes is None else 60.0 * minutes

    def exceeded(self, stage: str) -> str:
        """What to say when ``stage`` ran past its limit: the setting, its value, and what to do."""
        minutes = getattr(self, "validate_" if stage == "validate" else stage)
        return (
            f"the {stage} stage ran longer than timeouts.{stage} = {minutes:g} minute(s) and was stopped; raise it "
            f"(--set timeouts.{stage}=MINUTES) or remove the limit (--set timeouts.{stage}=null) and run the same "
            "command again: finished stages are reused and training resumes from its last checkpoint"
        )
