"""The end-to-end Text2Grad pipeline: feedback -> annotate -> align + validate -> reward model -> PPO -> evaluate.

Every stage task is cached on its config and the content hashes of its inputs (tasks/caching.py), so a Retry of a
failed run, or a new run with the same inputs, skips every completed stage; changing one stage's config re-runs that
stage and the ones after it. ``refresh`` forces a stage (and everything downstream) to recompute.
"""

from __future__ import annotations

from prefect import flow

from flows.annotate import annotate
from flows.evaluate import evaluate
from flows.prepare import prepare_data
from flows.quality import align_and_validate
from flows.reward_model import train_reward_model
from flows.stages import Stage, close_tracking, downstream, open_tracking, run_stage
from flows.training import train_policy
from t2g_core.config import PipelineConfig


@flow(
    name="text2grad",
    on_running=[open_tracking],
    on_completion=[close_tracking],
    on_failure=[close_tracking],
    on_crashed=[close_tracking],
)
def text2grad(config: PipelineConfig = PipelineConfig(), refresh: list[Stage] | None = None) -> dict:  # noqa: B008
    """Train a policy from natural-language feedback. Returns the references of every stage's output."""
    forced = downstream(refresh)
    data = prepare_data(config, forced)
    annotations = annotate(config, data["feedback"], forced)
    quality = align_and_validate(config, data, annotations, forced)
    reward_model = run_stage(
        train_reward_model, config=config, data=data, annotations=annotations, quality=quality, forced=forced
    )
    policy = run_stage(train_policy, config=config, data=data, reward_model=reward_model, forced=forced)
    report = evaluate(config, data, policy, forced)
    return {
        **data,
        "annotations": annotations,
        **quality,
        "reward_model": reward_model,
        "policy": policy,
        "evaluation": report,
    }
