"""Evaluate policies on the same held-out prompts, aggregate per item, compare each with a baseline.

Results are a folder: ``items.parquet`` (one row per policy, item and sample, one column per metric) and
``summary.json`` (settings, means, paired-bootstrap comparisons, judge win rates), always recomputable from the items
(how ``t2g eval report`` merges folders). The summary is written last, so its presence says the results are complete;
:meth:`EvalResults.load` names the file that is broken.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from t2g_core.config.evaluate import EvaluateConfig
from t2g_core.evaluation.bootstrap import paired_bootstrap
from t2g_core.evaluation.generate import generate_samples, generation_settings
from t2g_core.evaluation.metrics import TASK_METRICS, corpus_bleu, pass_at_k, task_metrics
from t2g_core.evaluation.reward import REWARD_METRICS, add_reward_scores
from t2g_core.store import BrokenFile, owned, parquet_problem, read_json, write_frame_atomic, write_text_atomic

if TYPE_CHECKING:
    import torch

ITEMS_FILE, SUMMARY_FILE = "items.parquet", "summary.json"
LOWER_IS_BETTER = frozenset({"invented_entity_rate", "fact_error", "rm_poor_spans"})
NO_DIRECTION = frozenset({"length_words", "length_chars"})


@dataclass
class EvalResults:
    items: pd.DataFrame  # one row per (policy, id, sample)
    summary: dict[str, Any] = field(default_factory=dict)

    def save(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / SUMMARY_FILE).unlink(missing_ok=True)  # no summary beside new items until both are complete
        write_frame_atomic(self.items, out / ITEMS_FILE)
        write_text_atomic(out / SUMMARY_FILE, json.dumps(self.summary, indent=2, default=_json_default))
        return out

    @classmethod
    def load(cls, path: str | Path) -> EvalResults:
        """The results in ``path``; :class:`~t2g_core.store.BrokenFile` naming the file when one is missing, cut
        short or unreadable."""
        folder = Path(path)
        if not (folder / ITEMS_FILE).exists() and not (folder / SUMMARY_FILE).exists():
            raise FileNotFoundError(
                f"{folder}: not an evaluation results folder (needs {ITEMS_FILE} and {SUMMARY_FILE})"
            )
        summary = read_json(folder / SUMMARY_FILE)
        if problem := parquet_problem(folder / ITEMS_FILE):
            raise BrokenFile(problem)
        if not isinstance(summary, dict) or "policies" not in summary:
            raise BrokenFile(f"{folder / SUMMARY_FILE}: not an evaluation summary (no 'policies')")
        return cls(pd.read_parquet(folder / ITEMS_FILE), summary)


def results_problem(path: str | Path, within: Path | None = None) -> str | None:
    """Why the results folder ``path`` cannot be reused (a file missing, cut short or unreadable), or None."""
    if not owned(path, within):
        return None
    try:
        EvalResults.load(path)
    except (FileNotFoundError, BrokenFile) as exc:
        return str(exc)
    return None


def _json_default(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else str(value)


def metric_columns(items: pd.DataFrame, task: str) -> list[str]:
    """Metric columns present in ``items`` (task metrics first, then the reward model's and the judge's scores),
    skipping all-empty ones."""
    names = [*TASK_METRICS[task], *REWARD_METRICS, "judge_score"]
    return [m for m in names if m in items.columns and items[m].notna().any()]


def item_scores(items: pd.DataFrame, task: str, pass_k: Sequence[int] = (1,)) -> pd.DataFrame:
    """Per (policy, id) scores: sample means, or pass@k for code. Index (policy, id), one column per metric."""
    groups = items.groupby(["policy", "id"], sort=False)
    if task == "code":
        n, c = groups["passed"].count(), groups["passed"].sum()
        at_k = {
            f"pass@{k}": [pass_at_k(int(a), int(b), k) if a >= k else np.nan for a, b in zip(n, c, strict=True)]
            for k in pass_k
        }
        passed = pd.DataFrame(at_k, index=n.index)
        scored = [m for m in REWARD_METRICS if m in items.columns and items[m].notna().any()]
        return passed.join(groups[scored].mean()) if scored else passed
    return groups[metric_columns(items, task)].mean()


def _direction_verdict(metric: str, raw: str) -> str:
    if raw == "no clear difference":
        return raw
    higher = raw == "b better"
    if metric in NO_DIRECTION:
        return "higher" if higher else "lower"
    if metric in LOWER_IS_BETTER:
        higher = not higher
    return "better" if higher else "worse"


def compare(
    scores: pd.DataFrame, baseline: str, policies: Sequence[str], n: int = 2000, seed: int = 0, confidence: float = 0.95
) -> list[dict[str, Any]]:
    """Paired bootstrap of every metric for every policy against the baseline, on the items both have."""
    out = []
    base = scores.xs(baseline, level="policy")
    for policy in policies:
        if policy == baseline:
            continue
        cand = scores.xs(policy, level="policy")
        ids = base.index.intersection(cand.index)
        for metric in scores.columns:
            res = paired_bootstrap(base.loc[ids, metric], cand.loc[ids, metric], n=n, seed=seed, confidence=confidence)
            if res.n == 0:
                continue
            row = {"policy": policy, "baseline": baseline, "metric": metric, **res.to_dict()}
            row["verdict"] = _direction_verdict(metric, res.verdict)
            out.append(row)
    return out


def summarize(
    items: pd.DataFrame,
    task: str,
    *,
    baseline: str | None = None,
    settings: Mapping[str, Any] | None = None,
    cfg: EvaluateConfig | None = None,
) -> dict[str, Any]:
    """The summary dict (per-policy means, comparisons, judge rates) computed from the per-item rows."""
    cfg = cfg or EvaluateConfig()
    policies = list(dict.fromkeys(items["policy"]))
    baseline = baseline or policies[0]
    if baseline not in policies:
        raise ValueError(f"baseline {baseline!r} is not among the evaluated policies {policies}")
    scores = item_scores(items, task, cfg.pass_k)
    summary: dict[str, Any] = {"task": task, "baseline": baseline, "confidence": cfg.confidence, "policies": {}}
    for policy in policies:
        rows = items[items["policy"] == policy]
        means = scores.xs(policy, level="policy").mean(numeric_only=True)
        entry = {
            "n_items": int(rows["id"].nunique()),
            "n_rows": len(rows),
            "failed_rows": int((rows["status"] != "ok").sum()),
            "metrics": {k: float(v) for k, v in means.items() if not pd.isna(v)},
            "settings": dict((settings or {}).get(policy, {})),
        }
        if task == "summarization" and "bleu" in scores.columns:
            ok = rows[rows["reference"].notna()] if "reference" in rows else rows.iloc[0:0]
            if len(ok):
                entry["metrics"]["corpus_bleu"] = corpus_bleu(ok["response"].tolist(), ok["reference"].tolist())
        summary["policies"][policy] = entry
    summary["comparisons"] = compare(scores, baseline, policies, cfg.bootstrap_samples, cfg.seed, cfg.confidence)
    return summary


Generator = Callable[[str | Path, str, Sequence[str], EvaluateConfig], list[list[str]]]


def policy_rows(
    policy: str, feedback: pd.DataFrame, samples: list[list[str]], task: str, **metric_kwargs: Any
) -> pd.DataFrame:
    """Per-sample rows with metrics for one policy's responses to ``feedback``'s prompts."""
    base_rows = feedback.to_dict("records")
    rows = [
        {**r, "response": s, "sample": j} for r, ss in zip(base_rows, samples, strict=True) for j, s in enumerate(ss)
    ]
    metrics = task_metrics(task, rows, **metric_kwargs)
    out = []
    for r, m in zip(rows, metrics, strict=True):
        status, error = m.pop("status", "ok"), m.pop("error", None)
        status = "ok" if status in ("ok", "passed", "failed", "error", "timeout") else status
        given = {k: r[k] for k in ("id", "sample", "prompt", "response")}
        out.append({"policy": policy, **given, "reference": r.get("reference"), "status": status, "error": error, **m})
    return pd.DataFrame(out)


def held_out(feedback: pd.DataFrame, task: str, max_prompts: int) -> pd.DataFrame:
    """The evaluation set: the first ``max_prompts`` items of ``task`` (give held-out data: nothing is split here)."""
    rows = feedback[feedback["task"] == task]
    if rows.empty:
        tasks = sorted(set(feedback["task"]))
        raise ValueError(f"no {task!r} items in the evaluation data (it has: {', '.join(tasks) or 'nothing'})")
    return rows.head(max_prompts).reset_index(drop=True)


def evaluate_policies(
    policies: Mapping[str, str | Path],
    feedback: pd.DataFrame,
    task: str,
    cfg: EvaluateConfig,
    *,
    baseline: str | None = None,
    judge: Any | None = None,
    reward_scorer: Any | None = None,
    generator: Generator | None = None,
    device: str = "cpu",
    progress: Callable[[str], None] | None = None,
    dtype: torch.dtype | None = None,
    **metric_kwargs: Any,
) -> EvalResults:
    """Generate with every policy (in ``dtype``) on the same held-out prompts, score them and compare with the
    baseline (the first policy). ``judge`` adds a per-item ``judge_score`` for every other policy; ``reward_scorer``
    adds ``rm_reward`` and ``rm_poor_spans`` (:mod:`t2g_core.evaluation.reward`): both need no references."""
    if not policies:
        raise ValueError("evaluate_policies: give at least one policy")
    generator = generator or (lambda ref, t, p, c: generate_samples(ref, t, p, c, device=device, dtype=dtype))
    data = held_out(feedback, task, cfg.max_prompts)
    prompts = data["prompt"].tolist()
    frames, settings = [], {}
    for name, ref in policies.items():
        if progress:
            progress(f"generating with {name} ({ref}) on {len(prompts)} prompts")
        samples = generator(ref, task, prompts, cfg)
        frames.append(policy_rows(name, data, samples, task, timeout_s=cfg.code_timeout_s, **metric_kwargs))
        settings[name] = {"ref": str(ref), **generation_settings(cfg)}
    items = pd.concat(frames, ignore_index=True)
    if reward_scorer is not None:
        if progress:
            progress(f"scoring {len(items)} responses with the reward model")
        items = add_reward_scores(items, reward_scorer, task)
    baseline = baseline or next(iter(policies))
    if judge is not None:
        items = add_judge_scores(items, judge, baseline)
    summary = summarize(items, task, baseline=baseline, settings=settings, cfg=cfg)
    if judge is not None:
        summary["judge"] = judge_summary(items, baseline, cfg)
    return EvalResults(items, summary)


JUDGE_COLUMNS = ("judge_score", "judge_outcome", "judge_status", "judge_error", "judge_reply_ab", "judge_reply_ba")


def add_judge_scores(items: pd.DataFrame, judge: Any, baseline: str) -> pd.DataFrame:
    """Judge every policy's first sample against the baseline's; adds the JUDGE_COLUMNS (score, outcome, status,
    the error of a failed item and the judge's two replies)."""
    items = items.copy()
    for col in JUDGE_COLUMNS:
        items[col] = np.nan if col == "judge_score" else None
    first = items[items["sample"] == 0]
    base = first[first["policy"] == baseline].set_index("id")
    for policy in dict.fromkeys(first["policy"]):
        if policy == baseline:
            continue
        cand = first[(first["policy"] == policy) & first["id"].isin(base.index)]
        judgements = judge.judge(
            cand["prompt"].tolist(), base.loc[cand["id"], "response"].tolist(), cand["response"].tolist()
        )
        for idx, j in zip(cand.index, judgements, strict=True):
            items.loc[idx, list(JUDGE_COLUMNS)] = [j.score, j.outcome, j.status, j.error, j.reply_ab, j.reply_ba]
    return items


def judge_summary(items: pd.DataFrame, baseline: str, cfg: EvaluateConfig | None = None) -> dict[str, Any]:
    """Per policy: wins / losses / ties and the win rate with a bootstrap interval (a verdict only when it excludes
    0.5)."""
    cfg = cfg or EvaluateConfig()
    out = {}
    judged = items[items["judge_status"].notna()]
    for policy, rows in judged.groupby("policy", sort=False):
        ok = rows[rows["judge_status"] == "ok"]
        scores = ok["judge_score"].astype(float).to_numpy()
        res = paired_bootstrap(np.full(len(scores), 0.5), scores, cfg.bootstrap_samples, cfg.seed, cfg.confidence)
        out[policy] = {
            "baseline": baseline,
            "judged": len(ok),
            "failed": int(len(rows) - len(ok)),
            "wins": int((ok["judge_outcome"] == "win").sum()),
            "losses": int((ok["judge_outcome"] == "loss").sum()),
            "ties": int((ok["judge_outcome"] == "tie").sum()),
            "win_rate": float(scores.mean()) if len(scores) else None,  # None: nothing judged, no rate
            "low": res.low + 0.5 if len(scores) else None,
            "high": res.high + 0.5 if len(scores) else None,
            "verdict": _direction_verdict("judge_score", res.verdict) if len(scores) else "not judged",
            "first_error": next((e for e in rows.get("judge_error", ()) if isinstance(e, str)), None),
        }
    return out


def merge_results(
    results: Sequence[EvalResults], cfg: EvaluateConfig | None = None, baseline: str | None = None
) -> EvalResults:
    """Several result folders on the same task as one comparison (items concatenated, summary recomputed)."""
    if not results:
        raise ValueError("merge_results: nothing to merge")
    tasks = {r.summary.get("task") for r in results}
    if len(tasks) != 1:
        raise ValueError(f"cannot compare results of different tasks: {sorted(map(str, tasks))}")
    task = tasks.pop()
    seen: set[str] = set()
    for r in results:
        names = set(r.items["policy"])
        if names & seen:
            raise ValueError(
                f"policy name(s) {sorted(names & seen)} appear in more than one results folder; "
                "evaluate under distinct names (--model NAME=FOLDER)"
            )
        seen |= names
    items = pd.concat([r.items for r in results], ignore_index=True)
    settings = {p: e.get("settings", {}) for r in results for p, e in r.summary.get("policies", {}).items()}
    baseline = baseline or results[0].summary.get("baseline")
    summary = summarize(items, task, baseline=baseline, settings=settings, cfg=cfg)
    if "judge_status" in items.columns and items["judge_status"].notna().any():
        summary["judge"] = judge_summary(items, baseline, cfg)
    return EvalResults(items, summary)
