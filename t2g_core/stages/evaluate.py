"""Evaluation stage: generate with each policy on held-out prompts, score, compare with paired bootstrap intervals.

:func:`evaluate` compares any set of policies (``t2g eval policy``); :func:`pipeline` is the pipeline's stage: the
policy before PPO (the baseline) against the PPO policy, on the prompts PPO held out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from t2g_core.config.stages import EvaluateSettings
from t2g_core.stages.context import StageContext
from t2g_core.stages.io import read
from t2g_core.stages.refs import ArtifactRef, EvaluationRef, ModelsRef, PolicyRef, PolicySet

# the metric that decides promotion of a policy, per task: the first one the evaluation measured
PRIMARY_METRICS = {"summarization": ("fact_error", "rougeL"), "code": ("pass@1",), "qa": ("token_f1",)}
LOWER_IS_BETTER = ("fact_error", "invented_entity_rate")


def pipeline_policies(
    feedback: ArtifactRef, models: ModelsRef, policy: PolicyRef, settings: EvaluateSettings, name: str = "ppo"
) -> PolicySet:
    """``warm_start`` (baseline), optionally the untrained ``base``, then the PPO policy; on PPO's held-out prompts
    (its ``eval.parquet``), or on the same split redone from ``data`` when the run recorded none."""
    from t2g_core.ppo.sources import split_prompts

    eval_file = Path(policy.run_dir) / "eval.parquet"
    if eval_file.is_file():
        held_out = pd.read_parquet(eval_file, columns=["id"])["id"].tolist()
    elif settings.holdout.eval_fraction > 0:
        _, held = split_prompts(read(feedback, "feedback"), settings.holdout.eval_fraction, settings.holdout.seed)
        held_out = [] if held is None else held["id"].tolist()
    else:
        held_out = None
    chosen = {"warm_start": models.policy}
    if settings.evaluate.include_base_model:
        chosen["base"] = models.base
    chosen[name] = policy.adapter_dir
    registered = {name: policy.version} if policy.version else {}
    return PolicySet(
        models=chosen,
        baseline="warm_start",
        held_out=held_out,
        histories={name: policy.history_path},
        registered=registered,
        reward=policy.reward,
    )


def evaluate(
    data: ArtifactRef,
    policies: PolicySet,
    settings: EvaluateSettings,
    ctx: StageContext,
    *,
    judge=None,
    device: str | None = None,
) -> EvaluationRef:
    """Results (``items.parquet``, ``summary.json``) and the report (table, plots) in ``<reports/evaluate>/<key>``;
    results already there are reused unless the stage is forced. Every policy loads in ``models.dtype``, resolved
    once for ``device``."""
    frame = read(data, "feedback")
    if policies.held_out is not None:
        frame = frame[frame["id"].isin(set(policies.held_out))].reset_index(drop=True)
    if frame.empty:
        raise ValueError(f"{data.path}: no items to evaluate (held-out ids: {len(policies.held_out or [])})")
    task = settings.evaluate.task or str(frame["task"].iloc[0])
    with ctx.own_folder("reports/evaluate") as out:
        return _evaluate(frame, task, out, data, policies, settings, ctx, judge=judge, device=device)


def _evaluate(frame, task, out: Path, data, policies: PolicySet, settings, ctx: StageContext, *, judge, device):
    """The stage's work in its folder ``out`` (held by this run)."""
    from t2g_core.evaluation import evaluate_policies, write_report
    from t2g_core.evaluation.report import load_history
    from t2g_core.models.loading import resolve_dtype

    ctx.tracker.log_input(data, "feedback", "eval")
    results = None if ctx.force else reusable_results(out, ctx)
    if results is None:
        device = device or _device()
        results = evaluate_policies(
            policies.models,
            frame,
            task,
            settings.evaluate,
            baseline=policies.baseline,
            judge=judge,
            device=device,
            progress=ctx.log if ctx.progress else None,
            dtype=resolve_dtype(settings.models.dtype, device),
        )
        results.save(out)
    histories = {n: load_history(p) for n, p in policies.histories.items() if Path(p).is_file()}
    files = write_report(results, out / "report", histories, policies.reward)
    ctx.tracker.log_metrics(flat_metrics(results.summary))
    ctx.tracker.log_artifact(out, "evaluation")
    return EvaluationRef(
        path=str(out),
        summary=str(out / "summary.json"),
        report=str(files["report_md"]),
        n_rows=len(results.items),
        task=task,
    )


def reusable_results(out: Path, ctx: StageContext):
    """The complete results an earlier run left in ``out``, or None; broken ones are recomputed, with a log line."""
    from t2g_core.evaluation import EvalResults
    from t2g_core.store import BrokenFile

    if not (out / "summary.json").exists() and not (out / "items.parquet").exists():
        return None
    try:
        return EvalResults.load(out)
    except (FileNotFoundError, BrokenFile) as exc:
        ctx.log(f"evaluate: the results left in {out} are incomplete ({exc}); evaluating again")
        return None


def pipeline(
    feedback: ArtifactRef,
    models: ModelsRef,
    policy: PolicyRef,
    settings: EvaluateSettings,
    ctx: StageContext,
    *,
    judge=None,
) -> EvaluationRef:
    """The pipeline's evaluation: the policy before PPO against the PPO policy on the held-out prompts."""
    return evaluate(feedback, pipeline_policies(feedback, models, policy, settings), settings, ctx, judge=judge)


def flat_metrics(summary: dict) -> dict[str, float]:
    """Every policy's metrics and every comparison's difference and interval, as tracking-safe metric names."""
    out = {f"{p}/{m}": v for p, e in summary["policies"].items() for m, v in e["metrics"].items()}
    for c in summary["comparisons"]:
        for field in ("diff", "low", "high"):
            out[f"{c['policy']}_vs_{c['baseline']}/{c['metric']}_{field}"] = c[field]
    for p, j in (summary.get("judge") or {}).items():
        out[f"{p}/judge_win_rate"] = j["win_rate"]
    return {re.sub(r"[^\w./\- ]", "_", k): v for k, v in out.items()}  # no '@' (pass@k) in tracking names


def promotion(summary: dict, policy: str) -> tuple[str, float] | None:
    """(metric, score) by which ``policy`` may become the champion, or None when its evaluation verdict against the
    baseline on the task's primary metric is not "better". The score is oriented so that higher is better."""
    candidates = [c for c in summary.get("comparisons", []) if c["policy"] == policy]
    for metric in PRIMARY_METRICS.get(summary.get("task"), ()):
        found = next((c for c in candidates if c["metric"] == metric), None)
        if found is None:
            continue
        if found["verdict"] != "better":
            return None
        value = float(summary["policies"][policy]["metrics"][metric])
        return metric, -value if metric in LOWER_IS_BETTER else value
    return None


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
