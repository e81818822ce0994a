"""Evaluation stage: generate with each policy on held-out prompts, score, compare with paired bootstrap intervals.

:func:`evaluate` compares any set of policies (``t2g eval policy``); :func:`pipeline` is the pipeline's stage: the
policy before PPO (the baseline) against the PPO policy, on the prompts PPO held out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from t2g_core.config import RewardModelConfig
from t2g_core.config.stages import EvaluateSettings
from t2g_core.evaluation import EvalResults, evaluate_policies, write_report
from t2g_core.evaluation.outcome import outcome
from t2g_core.evaluation.report import load_history
from t2g_core.feedback import split_prompts
from t2g_core.reward_model.scoring import load_scorer
from t2g_core.stages.context import StageContext
from t2g_core.stages.io import read
from t2g_core.stages.refs import ArtifactRef, EvaluationRef, ModelsRef, PolicyRef, PolicySet
from t2g_core.store import BrokenFile


def pipeline_policies(
    feedback: ArtifactRef, models: ModelsRef, policy: PolicyRef, settings: EvaluateSettings, name: str = "ppo"
) -> PolicySet:
    """``warm_start`` (baseline), optionally the untrained ``base``, then the PPO policy; on PPO's held-out prompts
    (its ``eval.parquet``), or on the same split redone from ``data`` when the run recorded none."""
    eval_file = Path(policy.run_dir) / "eval.parquet"
    if eval_file.is_file():
        held_out = pd.read_parquet(eval_file, columns=["id"])["id"].tolist()
    elif settings.holdout.eval_fraction > 0:
        _, held = split_prompts(read(feedback, "feedback"), settings.holdout)
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
    reward_model: tuple[str, object] | None = None,
) -> EvaluationRef:
    """Results and report in ``<reports/evaluate>/<key>`` (reused unless forced), every policy in ``models.dtype``;
    ``reward_model`` (folder, config) scores every response when ``evaluate.reward_model_score``."""
    frame = read(data, "feedback")
    if policies.held_out is not None:
        frame = frame[frame["id"].isin(set(policies.held_out))].reset_index(drop=True)
    if frame.empty:
        raise ValueError(f"{data.path}: no items to evaluate (held-out ids: {len(policies.held_out or [])})")
    task = settings.evaluate.task or str(frame["task"].iloc[0])
    with ctx.own_folder("reports/evaluate") as out:
        return _evaluate(
            frame, task, out, data, policies, settings, ctx, judge=judge, device=device, reward_model=reward_model
        )


def _evaluate(
    frame, task, out: Path, data, policies: PolicySet, settings, ctx: StageContext, *, judge, device, reward_model
):
    """The stage's work in its folder ``out`` (held by this run)."""
    from t2g_core.models.loading import resolve_dtype

    ctx.tracker.log_input(data, "feedback", "eval")
    results = None if ctx.force else reusable_results(out, ctx)
    if results is None:
        device = device or _device()
        dtype = resolve_dtype(settings.models.dtype, device)
        scorer = None
        if reward_model is not None and settings.evaluate.reward_model_score:
            scorer = load_scorer(reward_model[0], reward_model[1], device=device, dtype=dtype)
        results = evaluate_policies(
            policies.models,
            frame,
            task,
            settings.evaluate,
            baseline=policies.baseline,
            judge=judge,
            reward_scorer=scorer,
            device=device,
            progress=ctx.log if ctx.progress else None,
            dtype=dtype,
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
    """The pipeline's evaluation: the policy before PPO against the PPO policy on the held-out prompts, also scored by
    the reward model PPO learnt from (if it learnt from one)."""
    policies = pipeline_policies(feedback, models, policy, settings)
    return evaluate(feedback, policies, settings, ctx, judge=judge, reward_model=policy_reward_model(policy))


def policy_reward_model(policy: PolicyRef) -> tuple[str, object] | None:
    """The reward model a PPO run scored with (its folder and config, from the run's ``run.json``), or None when it
    used another reward source or the folder is gone."""
    spec_file = Path(policy.run_dir) / "run.json"
    if not spec_file.is_file():
        return None
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    path, config = spec.get("reward_model_path"), spec.get("config") or {}
    if (config.get("ppo") or {}).get("reward_source", "reward_model") != "reward_model" or not path:
        return None
    if not Path(path).exists():
        return None
    return str(path), RewardModelConfig.model_validate(config.get("reward_model") or {})


def flat_metrics(summary: dict) -> dict[str, float]:
    """Every policy's metrics and every comparison's difference and interval, as tracking-safe metric names."""
    out = {f"{p}/{m}": v for p, e in summary["policies"].items() for m, v in e["metrics"].items()}
    for c in summary["comparisons"]:
        for field in ("diff", "low", "high"):
            out[f"{c['policy']}_vs_{c['baseline']}/{c['metric']}_{field}"] = c[field]
    for p, j in (summary.get("judge") or {}).items():
        if j["win_rate"] is not None:  # None: nothing was judged (the report says so)
            out[f"{p}/judge_win_rate"] = j["win_rate"]
    return {re.sub(r"[^\w./\- ]", "_", k): v for k, v in out.items()}  # no '@' (pass@k) in tracking names


def promotion(summary: dict, policy: str) -> tuple[str, float] | None:
    """(metric, score) by which ``policy`` may become the champion, or None when its evaluation verdict against the
    baseline on the deciding metric (:func:`~t2g_core.evaluation.outcome.outcome`) is not "better". The score is
    oriented so that higher is better."""
    decided = outcome(summary, policy)
    if not decided.eligible or decided.after is None:
        return None
    return decided.metric, -decided.after if decided.lower_is_better else decided.after


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
