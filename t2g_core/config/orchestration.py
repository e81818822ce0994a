"""What the orchestration reads about a stage and a stage never does: where its group runs, how long it may run, and
how many processes a training stage runs as.

All three are keyed by the names of the stage table (``t2g_core.stages.registry``, which refuses to import when the two
``Literal`` lists below disagree with it), and none is part of a cache key: changing them re-runs nothing. A stage
stopped by its limit keeps what it finished: training resumes from its last checkpoint on the next run, annotation
from its answer cache.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, RootModel, model_validator

from t2g_core.config.base import StageConfig, refuse_renamed

StageName = Literal[
    "feedback", "models", "annotate", "align", "validate", "warmup", "policy_samples", "reward_model", "ppo", "evaluate"
]
GangStage = Literal["warmup", "reward_model", "ppo"]  # their function runs in every process of a launch (rank 0 writes)
Group = Literal["annotate", "align_and_validate", "warmup", "policy_samples", "reward_model", "ppo", "evaluate"]
RENAMED_GROUPS = {
    "train_reward_model": "reward_model",
    "warm_up_policy": "warmup",
    "sample_policy": "policy_samples",
    "train_policy": "ppo",
}


class PlacementConfig(RootModel[dict[Group, str]]):
    """``{group: work pool}``: each group named runs as the deployment of its flow on that pool, the others inline."""

    root: dict[Group, str] = Field({}, description="Work pool of each stage group named; the others run inline.")
    model_config = ConfigDict(frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return refuse_renamed("placement", data, RENAMED_GROUPS)

    def pool(self, group: str) -> str | None:
        return self.root.get(group)


Minutes = Annotated[float, Field(gt=0)] | None  # None: no limit


class TimeoutsConfig(RootModel[dict[StageName, Minutes]]):
    """``{stage: minutes}``: a stage may run this long before it is stopped (no limit unless named)."""

    root: dict[StageName, Minutes] = Field({}, description="Minutes each stage named may run (none unless named).")
    model_config = ConfigDict(frozen=True)

    def seconds(self, stage: str) -> float | None:
        minutes = self.root.get(stage)
        return None if minutes is None else 60.0 * minutes

    def exceeded(self, stage: str) -> str:
        """What to say when ``stage`` ran past its limit: the setting, its value, and what to do."""
        return (
            f"the {stage} stage ran longer than timeouts.{stage} = {self.root[stage]:g} minute(s) and was stopped; "
            f"raise it (--set timeouts.{stage}=MINUTES) or remove the limit (--set timeouts.{stage}=null) and run "
            "the same command again: finished stages are reused and training resumes from its last checkpoint"
        )


class Layout(StageConfig):
    """The processes one training stage runs as: ``processes`` on each of ``machines``, started by ``accelerate``."""

    processes: int = Field(
        1, ge=1, description="Processes per machine, one per GPU (on a host without CUDA: gloo on CPUs)."
    )
    machines: int = Field(1, ge=1, description="Machines the gang spans (more than one: started by the launcher).")
    accelerate: Literal["ddp", "fsdp"] = Field(
        "ddp", description="The accelerate config the gang starts with: deployments/accelerate/NAME.yaml."
    )
    launcher: Literal["local", "slurm", "kubernetes"] = Field(
        "local", description="What starts the machines: local (one), slurm (srun), kubernetes (a JobSet); docs/gpu.md."
    )

    @model_validator(mode="after")
    def _started(self) -> Layout:
        if self.machines > 1 and self.launcher == "local":
            raise ValueError(f"machines: {self.machines} needs a launcher that starts them (slurm or kubernetes)")
        return self

    @property
    def world(self) -> int:
        return self.processes * self.machines


class LayoutConfig(RootModel[dict[GangStage, Layout]]):
    """``{stage: layout}``: a training stage named runs as a gang of processes (one process unless named)."""

    root: dict[GangStage, Layout] = Field(
        {}, description="Processes each training stage named runs as (one unless named)."
    )
    model_config = ConfigDict(frozen=True)

    def of(self, stage: str) -> Layout:
        return self.root.get(stage, Layout())
