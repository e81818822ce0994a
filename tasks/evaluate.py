"""Evaluation task: the policy before PPO against the PPO policy on held-out prompts, reported and compared.

Results land in ``<workspace>/reports/evaluate/<key>/`` (``items.parquet``, ``summary.json``, ``report/``); a re-run
with the same inputs reuses them (``--refresh evaluate`` recomputes them). The PPO policy's registered version is
promoted to ``champion`` when its verdict against the baseline on the task's primary metric is "better" and its
score beats the champion's (the reward model's rule).
"""

from __future__ import annotations

from pathlib import Path

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.stages import EvaluateSettings
from t2g_core.datasets import dataset_name
from t2g_core.evaluation import EvalResults, comparison_table
from t2g_core.evaluation.judge import judge_for
from t2g_core.evaluation.outcome import Outcome, outcome
from t2g_core.evaluation.titles import words
from t2g_core.stages import evaluate
from t2g_core.stages.refs import ArtifactRef, EvaluationRef, ModelsRef, PolicyRef
from t2g_env import api_key
from t2g_mlflow.registry import champion_metric, describe_version, promote_if_better
from t2g_mlflow.tags import VERDICT_TAG
from tasks.caching import stage_task_options
from tasks.ppo import POLICY_MODEL
from tasks.stage import stage


@task(name="evaluate", **stage_task_options())
def evaluate_policy(
    feedback: ArtifactRef, models: ModelsRef, policy: PolicyRef, settings: EvaluateSettings, workspace: WorkspaceConfig
) -> EvaluationRef:
    """Baseline = the policy before PPO; returns the results folder, summary and report."""
    with stage(
        evaluate_policy, "evaluate", workspace, feedback=feedback, models=models, policy=policy, settings=settings
    ) as ctx:
        judge = judge_for(settings.evaluate, api_key(settings))
        ref = ctx.produced(evaluate.pipeline(feedback, models, policy, settings, ctx, judge=judge))
        if policy.version:
            promote_policy(ref, policy.version, workspace, ctx.log, policy, dataset_name(workspace, feedback))
    publish(ref)
    return ref


def promote_policy(
    ref: EvaluationRef,
    version: str,
    workspace: WorkspaceConfig,
    log,
    policy: PolicyRef | None = None,
    data: str | None = None,
) -> bool:
    """``champion`` moves to this policy version when its evaluation says so (see the module docstring); the version
    carries its metric as measured, the metric's direction, the verdict and a description in words."""
    import json

    result = outcome(json.loads(Path(ref.summary).read_text(encoding="utf-8")))
    metric = result.metric or "score"
    promoted = promote_if_better(
        POLICY_MODEL,
        version,
        metric,
        result.after,
        workspace,
        lower_is_better=result.lower_is_better,
        eligible=result.eligible,
    )
    said = "promoted to champion" if promoted else not_promoted(result)
    parts = [f"Policy after {policy.steps} PPO steps" if policy else "PPO policy", f"evaluated on {ref.task}"]
    if data:
        parts.append(f"learnt from {data}")
    if policy is not None and (policy.reward_model_version or policy.refreshed_reward_model_version):
        parts.append(reward_models_used(policy))
    describe_version(
        POLICY_MODEL,
        version,
        "; ".join(parts) + f". {result.headline()}. {said[0].upper()}{said[1:]}.",
        {VERDICT_TAG: result.verdict},
    )
    log(f"policy version {version}: {said}; {result.headline()}")
    return promoted


def reward_models_used(policy: PolicyRef) -> str:
    """The registered reward model PPO started from and, when the critique loop refreshed it, the one it ended on."""
    text = f"trained against reward model version {policy.reward_model_version or '(not registered)'}"
    if policy.refreshed_reward_model_version:
        text += (
            f", refreshed {len(policy.reward_models)} times by the critique loop into version "
            f"{policy.refreshed_reward_model_version}, which gave PPO's last rewards"
        )
    return text


def not_promoted(result: Outcome) -> str:
    """Why a policy version stayed out: its verdict against the policy before PPO, or the champion it did not beat
    (its version and metric)."""
    metric = result.metric or "score"
    held = champion_metric(POLICY_MODEL, metric) if result.eligible and result.after is not None else None
    if held is None:
        return f"not promoted ({metric}: {result.verdict} against the policy before PPO)"
    version, value = held
    return (
        f"not promoted: the champion, version {version}, has {words(metric)} {result.shown(value)} against this "
        f"version's {result.shown(result.after)} ({metric}: {result.verdict} against the policy before PPO)"
    )


def publish(ref: EvaluationRef) -> None:
    """The comparison table as a Prefect markdown artifact (when running inside Prefect)."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.context import TaskRunContext

    if TaskRunContext.get() is not None:
        table = comparison_table(EvalResults.load(ref.path))
        create_markdown_artifact(key="policy-evaluation", markdown=table, description="Policies on held-out prompts")
