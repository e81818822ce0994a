"""The end-to-end Text2Grad pipeline: feedback -> annotate -> align + validate -> reward model -> PPO -> evaluate.

Every stage task is cached on its code, its settings and the content of its inputs (``tasks/caching.py``), so a
Retry of a failed run, or a new run with the same inputs, skips every completed stage; changing a setting re-runs
the stages that read it and the ones after them. ``refresh`` forces a stage (and everything downstream) to
recompute. ``config.placement`` sends a stage group to a work pool (a GPU pool) instead of running it here.
"""

from __future__ import annotations

from prefect import flow

from flows.placement import Placement
from flows.stages import align_and_validate, annotate, evaluate, prepare_data, train_policy, train_reward_model
from t2g_core.config import PipelineConfig
from t2g_core.stages.order import Stage, downstream
from t2g_env.serving import ServedConfig
from tasks.pipeline import close_pipeline_run, open_pipeline_run, record_outputs


@flow(
    name="text2grad",
    on_running=[open_pipeline_run],
    on_completion=[close_pipeline_run],
    on_failure=[close_pipeline_run],
    on_crashed=[close_pipeline_run],
)
def text2grad(config: ServedConfig = PipelineConfig(), refresh: list[Stage] | None = None) -> dict:  # noqa: B008
    """Train a policy from natural-language feedback. Returns the references of every stage's output."""
    forced = sorted(downstream(refresh))
    place = Placement(config, forced)  # each stage group inline, or on the work pool config.placement names for it
    feedback, models = prepare_data(config, forced)
    annotations = place(annotate, feedback)
    spans, validation = place(align_and_validate, feedback, models, annotations)
    reward_model = place(train_reward_model, feedback, models, annotations, spans, validation)
    policy = place(train_policy, feedback, models, reward_model)
    evaluation = place(evaluate, feedback, models, policy)
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
