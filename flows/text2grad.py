"""The end-to-end Text2Grad pipeline: feedback -> annotate -> align + validate -> (warm-up -> policy samples) ->
reward model -> PPO -> evaluate.

Every stage task is cached on its code, its settings and the content of its inputs (``tasks/caching.py``), so a
Retry of a failed run, or a new run with the same inputs, skips every completed stage; changing a setting re-runs
the stages that read it and the ones after them. ``refresh`` forces a stage (and everything downstream) to
recompute. ``config.placement`` sends a stage group to a work pool (a GPU pool) instead of running it here.
``preset`` sizes the whole run (tiny, small, full: ``t2g_core.config.presets``) under every field of ``config`` left
at its default. The run ends with its outcome: a summary artifact, a log line, metrics and tags on its MLflow run.
"""

from __future__ import annotations

from prefect import flow

from flows.placement import Placement
from flows.stages import (
    align_and_validate,
    annotate,
    build_models,
    evaluate,
    prepare_feedback,
    sample_policy,
    train_policy,
    train_reward_model,
    warm_up_policy,
)
from t2g_core.config import PipelineConfig, Preset
from t2g_core.config.presets import with_preset
from t2g_core.stages.order import Stage, downstream
from t2g_env.serving import ServedConfig
from tasks.outcome import publish_outcome
from tasks.pipeline import close_pipeline_run, close_stale_runs, open_pipeline_run, record_outputs


@flow(
    name="text2grad",
    on_running=[open_pipeline_run],
    on_completion=[close_pipeline_run],
    on_failure=[close_stale_runs, close_pipeline_run],
    on_crashed=[close_stale_runs, close_pipeline_run],
)
def text2grad(
    preset: Preset = "full",
    config: ServedConfig = PipelineConfig(),  # noqa: B008
    refresh: list[Stage] | None = None,
) -> dict:
    """Train a policy from natural-language feedback. Returns the references of every stage's output.

    Args:
        preset: Size of the run, applied to every setting below left at its default: tiny (every stage in a few
            minutes, figures meaningless), small (half the demo's PPO steps and evaluation prompts), full (the
            defaults: the demo the README measures).
        config: Every stage's settings, in the order the stages run.
        refresh: Stages to recompute even when cached (and everything after them).
    """
    config = with_preset(config, preset)
    forced = sorted(downstream(refresh))
    place = Placement(config, forced)  # each stage group inline, or on the work pool config.placement names for it
    feedback = prepare_feedback(config, forced)
    annotations = place(annotate, feedback)  # first: it fails fast when the rows lack what the annotator needs
    models = build_models(config, feedback, forced)
    spans, validation = place(align_and_validate, feedback, models, annotations)
    start = place(warm_up_policy, feedback, models) if config.warmup.enabled else models  # the policy PPO starts from
    samples = place(sample_policy, feedback, start) if config.policy_samples.enabled else None  # its text, labelled
    reward_model = place(train_reward_model, feedback, models, annotations, spans, validation, samples)
    policy = place(train_policy, feedback, start, reward_model)
    evaluation = place(evaluate, feedback, start, policy)
    outputs = {
        "feedback": feedback,
        "models": models,
        "annotations": annotations,
        "spans": spans,
        "validation": validation,
        "reward_model": reward_model,
        "warmup": start if config.warmup.enabled else None,
        "policy_samples": samples,
        "policy": policy,
        "evaluation": evaluation,
    }
    record_outputs(outputs, config.workspace)
    publish_outcome(outputs, config.workspace)
    return outputs
