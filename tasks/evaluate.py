"""Evaluation task: generate with the policy before and after PPO on held-out prompts, score, compare, report.

Results land in ``<workspace>/reports/evaluate/<key>/`` (``items.parquet``, ``summary.json``, ``report/``), keyed by
the config and the content of the feedback artifact and policy folders, so a re-run with the same inputs reuses them
(``--refresh evaluate`` recomputes them).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from prefect import task

from t2g_core.config import DataConfig, EvaluateConfig, WorkspaceConfig
from tasks import tracking
from tasks.caching import content_digest, forced, stage_task_options


def _metric_name(name: str) -> str:
    return re.sub(r"[^\w./\- ]", "_", name)  # MLflow metric names: no '@' (pass@k)


def _flat_metrics(summary: dict) -> dict[str, float]:
    out = {f"{p}/{m}": v for p, e in summary["policies"].items() for m, v in e["metrics"].items()}
    for c in summary["comparisons"]:
        for field in ("diff", "low", "high"):
            out[f"{c['policy']}_vs_{c['baseline']}/{c['metric']}_{field}"] = c[field]
    for p, j in (summary.get("judge") or {}).items():
        out[f"{p}/judge_win_rate"] = j["win_rate"]
    return {_metric_name(k): v for k, v in out.items()}


def _judge(cfg: EvaluateConfig):
    if not cfg.judge_base_url:
        return None
    from t2g_core.evaluation.judge import PairwiseJudge

    return PairwiseJudge.from_endpoint(
        cfg.judge_base_url,
        cfg.judge_model,
        os.environ.get("OPENAI_API_KEY"),
        cfg.judge_timeout_s,
        cfg.judge_concurrency,
    )


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
        tmp = dst.with_name(f".{dst.name}.tmp")
        mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{name}/{version}", dst_path=str(tmp))
        tmp.rename(dst)
    found = [p.parent for p in sorted(dst.rglob("*config.json")) if p.name in ("adapter_config.json", "config.json")]
    if not found:
        raise ValueError(f"{ref}: version {version} holds no model or adapter folder (no config.json)")
    return found[0]


def _held_out(frame, policy: dict, data: DataConfig | None):
    """The feedback rows PPO did not train on (see ``evaluate_policy``), in feedback order."""
    from t2g_core.evaluation.policies import held_out_ids

    ids = held_out_ids(policy)
    if ids is None and data is not None and data.eval_fraction > 0:
        from t2g_core.ppo.sources import split_prompts

        _, held = split_prompts(frame, data.eval_fraction, data.seed)
        ids = [] if held is None else held["id"].tolist()
    return frame if ids is None else frame[frame["id"].isin(set(ids))].reset_index(drop=True)


def _publish(table: str) -> None:
    """The comparison table as a Prefect markdown artifact (when running inside Prefect)."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.context import TaskRunContext

    if TaskRunContext.get() is not None:
        create_markdown_artifact(key="policy-evaluation", markdown=table, description="Policies on held-out prompts")


@task(name="evaluate-policy", **stage_task_options(3600))
def evaluate_policy(
    feedback: dict,
    models: dict,
    policy: dict,
    cfg: EvaluateConfig,
    workspace: WorkspaceConfig,
    data: DataConfig | None = None,
) -> dict:
    """Baseline = the policy before PPO; returns {path, summary, report, n_rows, task}.

    The prompts are the ones PPO held out (its run folder's ``eval.parquet``); without one, the same split is redone
    from ``data`` (``t2g_core.ppo.sources.split_prompts``); without ``data``, every item is used.
    """
    from t2g_core.evaluation import EvalResults, comparison_table, evaluate_policies, write_report
    from t2g_core.evaluation.policies import histories, policy_refs
    from t2g_core.store import artifact_key, read_artifact
    from t2g_core.workspace import Workspace

    refs = policy_refs(models, policy, include_base=cfg.include_base_model)
    frame = _held_out(read_artifact(feedback["path"], "feedback"), policy, data)
    inputs = {
        "feedback": feedback["sha256"],
        "ids": ",".join(frame["id"]),
        **{n: content_digest(str(p)) or str(p) for n, p in refs.items()},
    }
    out = Workspace.at(workspace.root).reports / "evaluate" / artifact_key("evaluate", cfg, inputs)
    task_name = cfg.task or str(frame["task"].iloc[0])
    with tracking.stage_run(
        "evaluate", {**cfg.model_dump(mode="json"), "policies": {n: str(p) for n, p in refs.items()}}, workspace
    ):
        tracking.log_dataset(feedback, "feedback", "eval")
        if (out / "summary.json").exists() and not forced():  # --refresh evaluate generates and scores again
            results = EvalResults.load(out)
        else:
            results = evaluate_policies(
                refs, frame, task_name, cfg, judge=_judge(cfg), device="cuda" if _cuda() else "cpu"
            )
            results.save(out)
        files = write_report(results, out / "report", histories(policy))
        tracking.log_metrics(_flat_metrics(results.summary))
        tracking.log_artifact(out, "evaluation")
        _publish(comparison_table(results))
    return {
        "path": str(out),
        "summary": str(out / "summary.json"),
        "report": str(files["report_md"]),
        "n_rows": len(results.items),
        "task": task_name,
    }


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
