"""The stage groups of the pipeline, each a flow so it can run inline or on its own work pool (``placement``).

Every stage task is cached (``tasks/caching.py``); ``forced`` names the stages ``refresh`` recomputes. A group's
parameters are typed references, so a deployment on another work pool receives them as JSON and validates them.
"""

from __future__ import annotations

from prefect import flow

import tasks.align
import tasks.annotate
import tasks.evaluate
import tasks.policy_samples
import tasks.ppo
import tasks.reward_model
import tasks.warmup
from flows.review import ui_review
from t2g_core.config import PipelineConfig
from t2g_core.config.data import LATEST
from t2g_core.datasets import annotations_covering, latest_version, models_feedback
from t2g_core.stages.refs import (
    ArtifactRef,
    EvaluationRef,
    ModelsRef,
    PolicyRef,
    PolicySamplesRef,
    RewardModelRef,
    SourceRef,
    ValidationRef,
)
from t2g_core.stages.registry import settings_for
from t2g_env.serving import ServedConfig, ServedRef
from tasks import data
from tasks import validate as v
from tasks.caching import cached
from tasks.data import record_first_versions

RESULTS = {"persist_result": True, "result_serializer": "json"}  # a deployment's result is read by the caller


def _step(task, config: PipelineConfig, stage: str, forced: list[str] | None):
    limits = config.timeouts  # none unless set: a stage stopped by its limit resumes from its checkpoints
    return cached(
        task,
        config.workspace.root,
        refresh=stage in (forced or []),
        limit_s=limits.seconds(stage),
        on_limit=limits.exceeded(stage) if limits.seconds(stage) else "",
    )


@flow(name="feedback", **RESULTS)
def feedback(config: ServedConfig, forced: list[str] | None = None) -> ArtifactRef:
    """The feedback artifact: the demo data, the configured source, or the dataset's latest version."""
    if config.data.source == LATEST:
        return latest_version(config.workspace)
    return _step(data.materialise_feedback, config, "feedback", forced)(
        SourceRef.of(config.data), settings_for("feedback", config), config.workspace
    )


@flow(name="models", **RESULTS)
def models(config: ServedConfig, feedback: ServedRef[ArtifactRef], forced: list[str] | None = None) -> ModelsRef:
    """The base models: built locally for the feedback's task (tiny; for any version of the feedback dataset, from
    its first version, so new feedback reuses them), or the named ones."""
    return _step(data.build_models, config, "models", forced)(
        models_feedback(config.workspace, feedback), settings_for("models", config), config.workspace
    )


@flow(name="annotate", **RESULTS)
def annotate(config: ServedConfig, feedback: ServedRef[ArtifactRef], forced: list[str] | None = None) -> ArtifactRef:
    """Critiques and quoted good/poor spans for every feedback item; they become version 1 of the datasets. The stage
    first checks that every item has what the annotator needs (a reference, tests, a critique, an endpoint). With
    ``data.source: latest`` the annotations re-annotation made for that version are reused (unless refreshed)."""
    settings = settings_for("annotate", config)
    reuse = config.data.source == LATEST and "annotate" not in (forced or [])
    annotations = annotations_covering(config.workspace, feedback) if reuse else None
    if annotations is None:
        annotations = _step(tasks.annotate.annotate_task(settings), config, "annotate", forced)(
            feedback, settings, config.workspace
        )
    record_first_versions(feedback, annotations, config.workspace)
    return annotations


@flow(name="align_and_validate", **RESULTS)
def align_and_validate(
    config: ServedConfig,
    feedback: ServedRef[ArtifactRef],
    models: ServedRef[ModelsRef],
    annotations: ServedRef[ArtifactRef],
    forced: list[str] | None = None,
) -> tuple[ArtifactRef, ValidationRef]:
    """Quoted spans -> character offsets; a review sample, its verdicts, the gates (a failed gate fails the run)."""
    ws, settings = config.workspace, settings_for("validate", config)
    spans = _step(tasks.align.align, config, "align", forced)(
        feedback, annotations, models, settings_for("align", config), ws
    )
    sample = verdicts = None
    if settings.validate_.review != "none":
        sample = _step(v.draw_review_sample, config, "validate", forced)(annotations, spans, feedback, settings, ws)
    if settings.validate_.review == "auto":
        verdicts = _step(v.auto_review, config, "validate", forced)(sample, annotations, spans, feedback)
    elif settings.validate_.review == "ui":
        verdicts = ui_review(sample, settings.validate_)
    report = _step(v.validation_report, config, "validate", forced)(
        annotations, spans, feedback, sample, verdicts, settings, ws
    )
    return spans, report


@flow(name="reward_model", **RESULTS)
def reward_model(
    config: ServedConfig,
    feedback: ServedRef[ArtifactRef],
    models: ServedRef[ModelsRef],
    annotations: ServedRef[ArtifactRef],
    spans: ServedRef[ArtifactRef],
    validation: ServedRef[ValidationRef],
    samples: ServedRef[PolicySamplesRef | None] = None,
    forced: list[str] | None = None,
) -> RewardModelRef:
    """The reward model on the validated annotations (and the policy's labelled samples, when drawn); registered in
    MLflow (candidate, maybe champion)."""
    settings, layout = settings_for("reward_model", config), config.layout.of("reward_model")
    return _step(tasks.reward_model.train_reward_model, config, "reward_model", forced)(
        feedback, annotations, spans, validation, models, settings, config.workspace, samples, layout
    )


@flow(name="warmup", **RESULTS)
def warmup(
    config: ServedConfig,
    feedback: ServedRef[ArtifactRef],
    models: ServedRef[ModelsRef],
    forced: list[str] | None = None,
) -> ModelsRef:
    """The policy before PPO, supervised on the training prompts' references (``warmup``); PPO starts from it and
    keeps it as its KL reference."""
    return _step(tasks.warmup.warm_up, config, "warmup", forced)(
        feedback, models, settings_for("warmup", config), config.workspace, config.layout.of("warmup")
    )


@flow(name="policy_samples", **RESULTS)
def policy_samples(
    config: ServedConfig,
    feedback: ServedRef[ArtifactRef],
    models: ServedRef[ModelsRef],
    forced: list[str] | None = None,
) -> PolicySamplesRef:
    """The policy PPO starts from, sampled on training prompts, its responses labelled by the annotator
    (``policy_samples``): data for the reward model on the text it will score."""
    settings = settings_for("policy_samples", config)
    return _step(tasks.policy_samples.sample_task(settings), config, "policy_samples", forced)(
        feedback, models, settings, config.workspace
    )


@flow(name="ppo", **RESULTS)
def ppo(
    config: ServedConfig,
    feedback: ServedRef[ArtifactRef],
    models: ServedRef[ModelsRef],
    reward_model: ServedRef[RewardModelRef | None],
    forced: list[str] | None = None,
) -> PolicyRef:
    """PPO from the policy before PPO with the configured reward source, in ``layout.ppo``'s processes; the adapter is
    registered in MLflow."""

    settings = settings_for("ppo", config)
    used = reward_model if settings.uses_reward_model else None  # the oracle and an endpoint need none
    return _step(tasks.ppo.train_policy, config, "ppo", forced)(
        feedback, models, used, settings, config.workspace, config.layout.of("ppo")
    )


@flow(name="evaluate", **RESULTS)
def evaluate(
    config: ServedConfig,
    feedback: ServedRef[ArtifactRef],
    models: ServedRef[ModelsRef],
    policy: ServedRef[PolicyRef],
    forced: list[str] | None = None,
) -> EvaluationRef:
    """The policy before PPO against the PPO policy on held-out prompts, with paired bootstrap intervals."""
    return _step(tasks.evaluate.evaluate_policy, config, "evaluate", forced)(
        feedback, models, policy, settings_for("evaluate", config), config.workspace
    )
