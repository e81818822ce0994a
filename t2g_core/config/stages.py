"""Which configuration sections each stage reads: one settings model per stage, the table derived from them.

A stage's settings model holds exactly the ``PipelineConfig`` sections its function reads, so a setting outside them
cannot reach the stage, and every setting inside them is part of the stage's cache key. The stage table
(``t2g_core.stages.registry``) names each stage's model; ``t2g config stages`` prints what each reads. ``workspace``
(where outputs go), ``placement`` (which work pool runs a stage), ``layout`` (its processes) and ``timeouts`` (how long
a stage may run) are read by the orchestration, never by a stage, and ``checks`` (risks accepted) only when the
configuration is validated: changing them re-runs nothing.

The settings also answer what the adapters around a stage must know and should not re-decide: which environment
variable holds the API key the stage sends to an outside service (``api_key_env``; the adapters read it, the library
never does), and whether PPO scores with the reward model (``uses_reward_model``).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from t2g_core.config import (
    AlignConfig,
    AnnotateConfig,
    DataConfig,
    EvaluateConfig,
    HoldoutConfig,
    ModelsConfig,
    PipelineConfig,
    PolicySamplesConfig,
    PPOConfig,
    RewardModelConfig,
    StageConfig,
    ValidateConfig,
    WarmupConfig,
)


class StageSettings(StageConfig):
    """The config sections one stage reads (field names are ``PipelineConfig`` field names)."""

    ALSO_READS: ClassVar[tuple[str, ...]] = ()  # settings of other sections it takes as values (their defaults)

    @classmethod
    def from_pipeline(cls, cfg: PipelineConfig) -> StageSettings:
        return cls(**{name: getattr(cfg, name) for name in cls.model_fields})

    @classmethod
    def sections(cls) -> tuple[str, ...]:
        """Section names as the YAML file and ``--set`` spell them (``validate``, not ``validate_``)."""
        return tuple(f.alias or name for name, f in cls.model_fields.items())

    @property
    def api_key_env(self) -> str | None:
        """The environment variable holding the API key this stage sends to an outside service (None: it sends none)."""
        return None


class FeedbackSettings(StageSettings):
    data: DataConfig = Field(default_factory=DataConfig, description="Feedback to learn from.")


class ModelsSettings(StageSettings):
    models: ModelsConfig = Field(default_factory=ModelsConfig, description="Base models.")


class AnnotateSettings(StageSettings):
    annotate: AnnotateConfig = Field(default_factory=AnnotateConfig, description="Annotation stage.")

    @property
    def api_key_env(self) -> str | None:
        """The LLM annotator's key variable (the programmatic critics call no service)."""
        return self.annotate.api_key_env if self.annotate.annotator == "llm" else None


class AlignSettings(StageSettings):
    align: AlignConfig = Field(default_factory=AlignConfig, description="Span alignment stage.")


class ValidateSettings(StageSettings):
    validate_: ValidateConfig = Field(default_factory=ValidateConfig, alias="validate", description="Validation.")

    model_config = StageSettings.model_config | {"populate_by_name": True}


class RewardModelSettings(StageSettings):
    reward_model: RewardModelConfig = Field(default_factory=RewardModelConfig, description="Reward model.")
    align: AlignConfig = Field(default_factory=AlignConfig, description="How its spans become token labels.")
    models: ModelsConfig = Field(default_factory=ModelsConfig, description="The weights dtype the base loads in.")


class WarmupSettings(StageSettings):
    warmup: WarmupConfig = Field(default_factory=WarmupConfig, description="Supervised warm-up.")
    holdout: HoldoutConfig = Field(
        default_factory=HoldoutConfig, description="The prompts held out from training (never warmed up on)."
    )
    models: ModelsConfig = Field(default_factory=ModelsConfig, description="The weights dtype the policy loads in.")


class PolicySamplesSettings(AnnotateSettings):
    ALSO_READS = ("ppo.sampling (as policy_samples.sampling: null)",)

    policy_samples: PolicySamplesConfig = Field(
        default_factory=PolicySamplesConfig, description="How many responses, sampled how."
    )
    holdout: HoldoutConfig = Field(default_factory=HoldoutConfig, description="The prompts held out (never sampled).")
    models: ModelsConfig = Field(default_factory=ModelsConfig, description="The weights dtype the policy loads in.")

    @classmethod
    def from_pipeline(cls, cfg: PipelineConfig) -> PolicySamplesSettings:
        """The sections, with ``policy_samples.sampling: null`` replaced by PPO's sampling as a value (so a change of
        ``ppo.sampling`` re-samples)."""
        settings = super().from_pipeline(cfg)
        if settings.policy_samples.sampling is not None:
            return settings
        own = settings.policy_samples.model_copy(update={"sampling": cfg.ppo.sampling})
        return settings.model_copy(update={"policy_samples": own})


OFFLINE_LABELLERS = ("reference", "code")  # annotators that label a fresh response with no outside service


class PPOSettings(StageSettings):
    ppo: PPOConfig = Field(default_factory=PPOConfig, description="PPO.")
    holdout: HoldoutConfig = Field(default_factory=HoldoutConfig, description="The prompts held out from training.")
    align: AlignConfig = Field(default_factory=AlignConfig, description="How critiques' spans become token rewards.")
    reward_model: RewardModelConfig = Field(
        default_factory=RewardModelConfig, description="How the reward model scores (reward_source=reward_model)."
    )
    models: ModelsConfig = Field(
        default_factory=ModelsConfig, description="The weights dtype the policy and the reward model load in."
    )
    annotate: AnnotateConfig = Field(
        default_factory=AnnotateConfig, description="The annotator the critique loop sends rollouts to."
    )

    def fingerprint(self) -> dict:
        """What PPO's cache key holds of these settings: all of them, but the annotator's only while the critique
        loop is on (otherwise no annotation setting re-runs PPO)."""
        return self.model_dump(mode="json", by_alias=True, exclude=None if self.critique_loop()[0] else {"annotate"})

    @model_validator(mode="after")
    def _one_key(self) -> PPOSettings:
        if self.ppo.reward_source == "endpoint" and self.uses_annotator_key:
            endpoint, annotator = self.reward_model.endpoint.api_key_env, self.annotate.api_key_env
            if endpoint != annotator:
                raise ValueError(
                    f"PPO would send two API keys ({endpoint} to the reward endpoint, {annotator} to the critique "
                    "loop's LLM annotator); name one variable in both reward_model.endpoint.api_key_env and "
                    "annotate.api_key_env"
                )
        return self

    @property
    def uses_annotator_key(self) -> bool:
        """The critique loop calls the LLM annotator (an outside service with a key)."""
        return self.critique_loop()[0] and self.annotate.annotator == "llm"

    def critique_loop(self, processes: int = 1) -> tuple[bool, str]:
        """Whether PPO runs the critique loop, and why: decided here alone (the PPO stage, its cache key and the
        loop ask). It needs the reward model the pipeline trained and one process; ``auto`` also wants it offline
        and refreshable (a tagger, audited by the reference or code critic)."""
        enabled, loop = self.ppo.critique_loop.enabled, "ppo.critique_loop.enabled="
        if enabled is False:
            return False, loop + "false"
        if enabled is True and processes > 1:
            raise ValueError(f"{loop}true runs in one process; turn it off for this {processes}-process run")
        why_not = [
            (not self.uses_trained_reward_model, "PPO does not score with the reward model the pipeline trained"),
            (processes > 1, f"{processes} processes (the loop runs in one)"),
        ]
        if enabled == "auto":
            annotator = self.annotate.annotator
            why_not += [
                (self.reward_model.kind != "tagger", f"reward_model.kind={self.reward_model.kind} cannot be refreshed"),
                (
                    annotator not in OFFLINE_LABELLERS,
                    f"annotate.annotator={annotator} (auto uses only the reference and code critics; set "
                    f"{loop}true to call an LLM)",
                ),
            ]
        reasons = [why for off, why in why_not if off]
        on = "the trained tagger, audited by the annotator offline" if enabled == "auto" else loop + "true"
        return not reasons, ("auto: " if enabled == "auto" else "") + ("; ".join(reasons) or on)

    @property
    def uses_reward_model(self) -> bool:
        """PPO scores rollouts with a reward model folder (``reward_source=reward_model``), not the oracle critic
        or an HTTP endpoint."""
        return self.ppo.reward_source == "reward_model"

    @property
    def uses_trained_reward_model(self) -> bool:
        """PPO scores with the reward model the pipeline trained (not one named by ``ppo.reward_model_path``)."""
        return self.uses_reward_model and not self.ppo.reward_model_path

    @property
    def api_key_env(self) -> str | None:
        """The HTTP reward source's key variable (``reward_source=endpoint``), else the critique loop's LLM annotator's
        (the two must be one variable when both are used)."""
        if self.ppo.reward_source == "endpoint":
            return self.reward_model.endpoint.api_key_env
        return self.annotate.api_key_env if self.uses_annotator_key else None


class EvaluateSettings(StageSettings):
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="Policy evaluation.")
    holdout: HoldoutConfig = Field(
        default_factory=HoldoutConfig, description="The held-out split, when the policy recorded none."
    )
    models: ModelsConfig = Field(default_factory=ModelsConfig, description="The weights dtype the policies load in.")

    @property
    def api_key_env(self) -> str | None:
        """The pairwise judge's key variable (when ``evaluate.judge_base_url`` names a judge)."""
        return self.evaluate.judge_api_key_env if self.evaluate.judge_base_url else None


NOT_STAGE_INPUTS = (
    "workspace",
    "placement",
    "layout",
    "timeouts",
    "checks",
)  # read by the orchestration (checks: before a run)
