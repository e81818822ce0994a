"""Evaluation task: the policy before PPO against the PPO policy on held-out prompts, reported and compared.

Results land in ``<workspace>/reports/evaluate/<key>/`` (``items.parquet``, ``summary.json``, ``report/``); a re-run
with the same inputs reuses them (``--refresh evaluate`` recomputes them). The PPO policy's registered version is
promoted to ``champion`` when its verdict against the baseline on the task's primary metric is "better" and its
score beats the champion's (the reward model's rule).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from prefect import task

from t2g_core.config import EvaluateConfig, WorkspaceConfig
from t2g_core.stages.refs import ArtifactRef, EvaluationRef, ModelsRef, PolicyRef
from t2g_core.stages.settings import EvaluateSettings
from tasks import tracking
from tasks.caching import stage_task_options
from tasks.ppo import POLICY_MODEL
from tasks.stage import stage


def judge_for(cfg: EvaluateConfig):
    """The pairwise LLM judge when ``judge_base_url`` is set (key from ``$OPENAI_API_KEY``), else None."""
    if not cfg.judge_base_url:
        return None
    from t2g_core.evaluation.judge import PairwiseJudge

    return PairwiseJudge.from_endpoint(
        cfg.judge_base_url,
        cfg.judge_model,
        os.environ.get("OPENAI_API_KEY"),
        cfg.judge_timeout_s,
        cfg.judge_concurrency,
        cfg.judge_max_tokens,
    )


@task(name="evaluate-policy", **stage_task_options(3600))
def evaluate_policy(
    feedback: ArtifactRef, models: ModelsRef, policy: PolicyRef, settings: EvaluateSettings, workspace: WorkspaceConfig
) -> EvaluationRef:
    """Baseline = the policy before PPO; returns the results folder, summary and report."""
    from t2g_core.stages import evaluate

    with stage(
        evaluate_policy, "evaluate", workspace, feedback=feedback, models=models, policy=policy, settings=settings
    ) as ctx:
        ref = ctx.produced(
            evaluate.pipeline(feedback, models, policy, settings, ctx, judge=judge_for(settings.evaluate))
        )
        if policy.version:
            promote_policy(ref, policy.version, ctx.log)
    publish(ref)
    return ref


def promote_policy(ref: EvaluationRef, version: str, log) -> bool:
    """``champion`` moves to this policy version when its evaluation says so (see the module docstring)."""
    import json

    from t2g_core.stages.evaluate import PRIMARY_METRICS, promotion

    summary = json.loads(Path(ref.summary).read_text(encoding="utf-8"))
    decided = promotion(summary, "ppo")
    metric = decided[0] if decided else next(iter(PRIMARY_METRICS.get(ref.task, ("score",))))
    promoted = tracking.promote_if_better(POLICY_MODEL, version, metric, decided[1] if decided else None)
    log(f"policy version {version}: " + ("promoted to champion" if promoted else f"not promoted ({metric})"))
    return promoted


def publish(ref: EvaluationRef) -> None:
    """The comparison table as a Prefect markdown artifact (when running inside Prefect)."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.context import TaskRunContext

    from t2g_core.evaluation import EvalResults, comparison_table

    if TaskRunContext.get() is not None:
        table = comparison_table(EvalResults.load(ref.path))
        create_markdown_artifact(key="policy-evaluation", markdown=table, description="Policies on held-out prompts")


def resolve_model_ref(ref: str, workspace: WorkspaceConfig) -> Path:
    """A folder as is; ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION`` is fetched from the MLflow model registry
    (once per version) into ``<workspace>/models/registry/NAME/vVERSION`` and that folder is returned."""
    if not ref.startswith("models:/"):
        return Path(ref)
    import mlflow
    from mlflow import MlflowClient

    from t2g_core.workspace import Workspace

    tracking.configure(workspace)
    spec = ref.removeprefix("models:/")
    name, sep, alias = spec.partition("@")
    if sep:
        version = MlflowClient().get_model_version_by_alias(name, alias).version
    else:
        name, _, version = spec.partition("/")
    dst = Workspace.at(workspace.root).models / "registry" / re.sub(r"[^\w.-]", "_", name) / f"v{version}"
    if not dst.exists():
        tmp = dst.with_name(f".{dst.name}.tmp-{uuid.uuid4().hex[:8]}")  # concurrent fetches never share a folder
        mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{name}/{version}", dst_path=str(tmp))
        try:
            tmp.rename(dst)
        except OSError:  # another process finished the same version first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    found = [p.parent for p in sorted(dst.rglob("*config.json")) if p.name in ("adapter_config.json", "config.json")]
    if not found:
        raise ValueError(f"{ref}: version {version} holds no model or adapter folder (no config.json)")
    return found[0]
