"""Reward-model task: validated annotations -> rm_data -> fine-tuning -> held-out evaluation -> MLflow registry.

The adapter folder is logged as an MLflow-3 LoggedModel (``t2g_mlflow.registry.log_adapter_model``; never
``mlflow.transformers.log_model`` for PEFT), registered as ``reward_model.registered_name`` with alias ``candidate``,
and promoted to ``champion`` when its ``reward_model.promote_metric`` beats the current champion's. Training resumes
from its own checkpoints, so the task has no Prefect retries; ``--refresh reward_model`` retrains from the start.
"""

from __future__ import annotations

import math

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.orchestration import Layout
from t2g_core.config.stages import RewardModelSettings
from t2g_core.datasets import dataset_name
from t2g_core.stages import reward_model
from t2g_core.stages.refs import ArtifactRef, ModelsRef, PolicySamplesRef, RewardModelRef, ValidationRef
from t2g_mlflow.registry import describe_version, log_adapter_model, promote_if_better
from tasks.caching import stage_task_options
from tasks.stage import run_stage, stage


@task(name="reward_model", **stage_task_options())
def train_reward_model(
    feedback: ArtifactRef,
    annotations: ArtifactRef,
    spans: ArtifactRef | None,
    validation: ValidationRef | None,
    models: ModelsRef,
    settings: RewardModelSettings,
    workspace: WorkspaceConfig,
    samples: PolicySamplesRef | None = None,
    layout: Layout | None = None,
) -> RewardModelRef:
    """Train (on the policy's labelled ``samples`` too, when drawn; in ``layout``'s processes), evaluate, register
    (alias ``candidate``) and maybe promote (alias ``champion``) the reward model."""
    cfg = settings.reward_model
    inputs = dict(feedback=feedback, annotations=annotations, spans=spans, validation=validation, models=models)
    with stage(train_reward_model, "reward_model", workspace, **inputs, settings=settings, samples=samples) as ctx:
        ref = run_stage(reward_model.train, ctx, layout, workspace, **inputs, settings=settings, samples=samples)
        params = {**cfg.model_dump(mode="json"), "base_model": ref.base, "rm_data_sha256": ref.rm_data.sha256}
        kind = "span-tagger" if ref.kind == "tagger" else "peft-adapter"
        version = log_adapter_model(
            ref.model_dir, cfg.registered_name, params, ref.metrics, alias="candidate", model_type=kind
        )
        value = ref.metrics.get(cfg.promote_metric, -math.inf)
        champion = promote_if_better(cfg.registered_name, version, cfg.promote_metric, value, workspace)
        describe_version(
            cfg.registered_name,
            version,
            f"Reward model ({ref.kind}) trained on {dataset_name(workspace, feedback)}; held-out {cfg.promote_metric} "
            f"{value:.3f} (higher is better); "
            + ("champion." if champion else "not champion (an earlier version scores higher)."),
        )
        return ctx.produced(ref.model_copy(update={"version": version, "champion": champion}))
