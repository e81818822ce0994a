"""The end-to-end Text2Grad pipeline: feedback -> annotate -> align + validate -> reward model -> PPO -> evaluate.

Every stage task is cached on its code, its settings and the content of its inputs (``tasks/caching.py``), so a
Retry of a failed run, or a new run with the same inputs, skips every completed stage; changing a setting re-runs
the stages that read it and the ones after them. ``refresh`` forces a stage (and everything downstream) to
recompute. ``config.placement`` sends a stage group to a work pool (a GPU pool) instead of running it here.
"""

from __future__ import annotations

from prefect import flow

from flows.placement import placed
from flows.stages import align_and_validate, annotate, evaluate, prepare_data, train_policy, train_reward_model
from t2g_core.config import PipelineConfig
from t2g_core.stages.order import Stage, downstream
from tasks.pipeline import close_pipeline_run, open_pipeline_run, record_outputs


@flow(
    name="text2grad",
    on_running=[open_pipeline_run],
    on_completion=[close_pipeline_run],
    on_failure=[close_pipeline_run],
    on_crashed=[close_pipeline_run],
)
def text2grad(config: PipelineConfig = PipelineConfig(), refresh: list[Stage] | None = None) -> dict:  # noqa: B008
    """Train a policy from natural-language feedback. Returns the references of every stage's output."""
    forced, where = sorted(downstream(refresh)), config.placement
    feedback, models = prepare_data(config, forced)
    annotations = placed(annotate, where.annotate, config=config, feedback=feedback, forced=forced)
    spans, validation = placed(
        align_and_validate,
        where.align_and_validate,
        config=config,
        feedback=feedback,
        models=models,
        annotations=annotations,
        forced=forced,
    )
    reward_model = placed(
        train_reward_model,
        where.train_reward_model,
        config=config,
        feedback=feedback,
        models=models,
        annotations=annotations,
        spans=spans,
        validation=validation,
        forced=forced,
    )
    policy = placed(
        train_policy,
        where.train_policy,
        config=config,
        feedback=feedback,
        models=models,
        reward_model=reward_model,
        forced=forced,
    )
    evaluation = placed(
        evaluate, where.evaluate, config=config, feedback=feedback, models=models, policy=policy, forced=forced
    )
    outputs = {
        "feedback": feedback,
        "models": models,
        "annotations": annotations,
        "spans": spans,
        "validation": validation,
        "reward_model": reward_model,
        "policy": policy,
        "evaluation": evaluation,
    }
    record_outputs(outputs, config.workspace)
    return outputs
