"""What a finished pipeline run prints: each stage's output, what was learnt, where to look."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from t2g_core.config import WorkspaceConfig
from t2g_core.datasets import dataset_name
from t2g_core.stages.registry import ORDER
from t2g_core.store import ArtifactRef
from t2g_mlflow.experiment import run_page
from t2g_mlflow.runs import find_pipeline_run

# the reward model's, in its stage line (truth: demo data; json_valid: the generative kind)
HEADLINE_METRICS = ("truth_poor_char_f1", "truth_recall_invented", "truth_recall_swapped", "truth_recall_redundant")
HEADLINE_METRICS += ("span_f1", "unmatched_span_rate", "json_valid_rate")
SHOWN = {  # the fields of each stage's reference worth a line
    "models": ("base", "policy"),
    "warmup": ("policy",),
    "validate": ("status", "report"),
    "reward_model": ("kind", "model_dir", "version", "champion", "global_step"),
    "ppo": ("adapter_dir", "steps", "version", "reward_model_version", "refreshed_reward_model_version"),
    "evaluate": ("path", "n_rows", "task"),
}


def _stage_line(name: str, ref: Any, workspace: WorkspaceConfig | None = None) -> str:
    value = ref.model_dump(mode="json", by_alias=True) if hasattr(ref, "model_dump") else ref
    if not isinstance(value, dict):
        return f"  {name:<14} {value}"
    if "n_rows" in value and "sha256" in value:
        return f"  {name:<14} {dataset_name(workspace, ArtifactRef.model_validate(value))}  {value['path']}"
    if name == "policy_samples":
        return f"  {name:<14} {value['feedback']['n_rows']} responses  {value['feedback']['path']}"
    fields = SHOWN.get(name, tuple(k for k, v in value.items() if not isinstance(v, (dict, list))))
    line = f"  {name:<14} " + ", ".join(f"{k}={value[k]}" for k in fields if value.get(k) is not None)
    metrics = value.get("metrics") if name == "reward_model" else None
    shown = [f"{k}={metrics[k]:.3f}" for k in HEADLINE_METRICS if isinstance((metrics or {}).get(k), (int, float))]
    line += f"\n  {'':<14} held-out: " + ", ".join(shown) if shown else ""
    reward = value.get("reward") if name == "ppo" else None
    return line + (f"\n  {'':<14} reward: {_reward_text(reward)}" if reward else "")


def _reward_text(reward: dict) -> str:
    what = reward.get("source", "?") + (f" ({reward['kind']})" if reward.get("kind") else "")
    parts = [what]
    if "score_share" in reward:
        parts.append(f"scoring {100 * reward['score_share']:.1f}% of the PPO step")
    if "rollout_unmatched_rate" in reward:
        parts.append(f"unmatched quotes on rollouts {100 * reward['rollout_unmatched_rate']:.1f}%")
    return ", ".join(parts)


def learnt_lines(evaluation: Any) -> list[str]:
    """The evaluation's comparison table (task score before and after PPO)."""
    path = Path(evaluation.summary) if evaluation is not None else None
    if path is None or not path.exists():
        return ["What was learnt: the evaluation did not run."]
    from t2g_core.evaluation.report import comparison_table

    summary = json.loads(path.read_text(encoding="utf-8"))
    return ["What was learnt (held-out prompts; baseline = the policy before PPO):", comparison_table(summary)]


def plot_lines(result: dict) -> list[str]:
    """Plots and reports of the evaluation, the PPO run (learning curves, token-reward heatmaps) and validation."""
    folders = []
    for name, attr in (("evaluate", "path"), ("ppo", "run_dir"), ("validate", "chart")):
        value = getattr(result.get(name), attr, None)
        if isinstance(value, str):
            p = Path(value)
            folders.append(p.parent if p.is_file() else p)
    files = [
        f
        for d in folders
        if d.exists()
        for f in sorted(d.rglob("*"))
        if f.suffix in (".png", ".html", ".md") and f.name != "README.md" and not _indexed(f)
    ]
    return [f"  {f}" for f in files[:12]]


def _indexed(page: Path) -> bool:
    """A step's heatmap page, reachable from the index page beside it."""
    return page.name.startswith("step-") and (page.parent / "index.html").exists()


def summary_lines(cfg: Any, result: dict, where: dict, seconds: float) -> list[str]:
    """What a finished run prints. Its first line gives the time and torch's thread count: the figures and the
    trained weights depend on it (``OMP_NUM_THREADS``)."""
    import torch  # loaded already by the stages this process ran

    lines = [f"Pipeline finished in {seconds:.0f} s with {torch.get_num_threads()} torch threads. Stage outputs:"]
    lines += [_stage_line(name, result[name], cfg.workspace) for name in ORDER if result.get(name) is not None]
    lines += ["", *learnt_lines(result.get("evaluate")), "", "Where to look:"]
    plots = plot_lines(result)
    if plots:
        lines += ["  Plots and reports:", *plots]
    run = find_pipeline_run(where["flow_run_id"], where["mlflow"], cfg.workspace.mlflow_experiment)
    lines.append(f"  MLflow run:       {run or 'none recorded'}  ({run_page(run, where['mlflow'])})")
    if not where["mlflow"].startswith("http"):
        mlflow = Path(sys.executable).parent / "mlflow"  # the venv's, which need not be on PATH
        lines.append(f"                    browse: {mlflow} ui --backend-store-uri {where['mlflow']}")
        if run:
            lines.append(f"                    then open {run_page(run, where['mlflow'], 'http://127.0.0.1:5000')}")
    ui = where.get("prefect_ui")
    flow_run = where["flow_run_id"]
    lines.append(
        f"  Prefect flow run: {flow_run}"
        + (f"  {ui}/runs/flow-run/{flow_run}" if ui else "  (temporary API; `make up` for the UI)")
    )
    lines.append(f"  Workspace:        {Path(cfg.workspace.root).resolve()}")
    return lines
