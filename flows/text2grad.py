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

from flows import stages
from flows.placement import Placement
from t2g_core.config import PipelineConfig, Preset
from t2g_core.config.orchestration import StageName
from t2g_core.config.presets import with_preset
from t2g_core.stages.registry import downstream
from t2g_env.serving import ServedConfig
from tasks.outcome import publish_outcome
from tasks.pipeline import HOOKS, record_outputs


@flow(name="text2grad", **HOOKS)
def text2grad(
    preset: Preset = "full",
    config: ServedConfig = PipelineConfig(),  # noqa: B008
    refresh: list[StageName] | None = None,
) -> dict:
    """Train a policy from natural-language feedback. Returns the references of every stage's output.

    Args:
        preset: Size of the run, applied to every setting below left at its default: tiny (every stage in a few
            minutes, figures meaningless), small (half the demo's PPO steps and evaluation prompts), full (the
            defaults: the demo the README measures). A setting set to its default counts as left: the preset's
            value wins there (`t2g run --preset tiny --set ppo.steps=40` keeps the 40).
        config: Every stage's settings, in the order the stages run.
        refresh: Stages to recompute even when cached (and everything after them).
    """
    config = with_preset(config, preset)
    forced = sorted(downstream(refresh))
    place = Placement(config, forced)  # each stage group inline, or on the work pool config.placement names for it
    feedback = place(stages.feedback)
    annotate = place(stages.annotate, feedback)  # first: it fails fast when the rows lack what the annotator needs
    models = place(stages.models, feedback)
    align, validate = place(stages.align_and_validate, feedback, models, annotate)
    warmup = place(stages.warmup, feedback, models) if config.warmup.enabled else None
    start = warmup or models  # the policy PPO starts from
    policy_samples = place(stages.policy_samples, feedback, start) if config.policy_samples.enabled else None
    reward_model = place(stages.reward_model, feedback, models, annotate, align, validate, policy_samples)
    ppo = place(stages.ppo, feedback, start, reward_model)
    evaluate = place(stages.evaluate, feedback, start, ppo)
    outputs = {  # keyed by the stage names of t2g_core.stages.registry, in its order
        "feedback": feedback,
        "models": models,
        "annotate": annotate,
        "align": align,
        "validate": validate,
        "warmup": warmup,
        "policy_samples": policy_samples,
        "reward_model": reward_model,
        "ppo": ppo,
        "evaluate": evaluate,
    }
    record_outputs(outputs, config.workspace)
    publish_outcome(outputs, config.workspace)
    return outputs
