"""What a finished pipeline run prints: each stage's output (or why it did not run), what was learnt, where to look."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEADLINE_METRICS = ("json_valid_rate", "span_f1", "unmatched_span_rate")  # the reward model's, in its stage line
ORDER = ("feedback", "models", "annotations", "spans", "validation", "reward_model", "policy", "evaluation")


def _stage_line(name: str, value: Any) -> str:
    if not isinstance(value, dict):
        return f"  {name:<13} {value}"
    if value.get("status") == "not built":
        return f"  {name:<13} NOT RUN: {value.get('reason', '')}"
    if "n_rows" in value:
        return f"  {name:<13} {value['n_rows']} rows  {value['path']}"
    line = f"  {name:<13} " + ", ".join(f"{k}={v}" for k, v in value.items() if not isinstance(v, (dict, list)))
    metrics = value.get("metrics") if isinstance(value.get("metrics"), dict) else {}
    shown = [f"{k}={metrics[k]:.3f}" for k in HEADLINE_METRICS if isinstance(metrics.get(k), (int, float))]
    return line + (f"\n  {'':<13} held-out: " + ", ".join(shown) if shown else "")


def _find_summary(ref: dict) -> Path | None:
    for key in ("summary", "summary_path", "path"):
        value = ref.get(key)
        if isinstance(value, str):
            p = Path(value)
            candidate = p if p.name == "summary.json" else p / "summary.json"
            if candidate.exists():
                return candidate
    return None


def learnt_lines(evaluation: Any) -> list[str]:
    """The evaluation's comparison table (task score before and after PPO, span vs scalar when configured)."""
    if not isinstance(evaluation, dict) or evaluation.get("status") == "not built":
        return ["What was learnt: evaluation did not run in this pipeline yet (see NOT RUN above)."]
    path = _find_summary(evaluation)
    if path is None:
        return [f"What was learnt: {json.dumps(evaluation)[:400]}"]
    from t2g_core.evaluation.report import comparison_table

    summary = json.loads(path.read_text(encoding="utf-8"))
    return ["What was learnt (held-out prompts; baseline = the policy before PPO):", comparison_table(summary)]


def plot_lines(result: dict) -> list[str]:
    """Plots and reports of the evaluation and of the PPO run (learning curves, token-reward heatmaps)."""
    folders = []
    for name, key in (("evaluation", "path"), ("policy", "run_dir"), ("validation", "chart")):
        value = result.get(name)
        if isinstance(value, dict) and isinstance(value.get(key), str):
            p = Path(value[key])
            folders.append(p.parent if p.is_file() else p)
    files = [
        f
        for d in folders
        if d.exists()
        for f in sorted(d.rglob("*"))
        if f.suffix in (".png", ".html", ".md") and f.name != "README.md"
    ]
    return [f"  {f}" for f in files[:12]]


def summary_lines(cfg: Any, result: dict, where: dict, seconds: float) -> list[str]:
    from flows.lineage import pipeline_run_for

    lines = [f"Pipeline finished in {seconds:.0f} s. Stage outputs:"]
    lines += [_stage_line(name, result[name]) for name in ORDER if name in result]
    lines += ["", *learnt_lines(result.get("evaluation")), "", "Where to look:"]
    plots = plot_lines(result)
    if plots:
        lines += ["  Plots and reports:", *plots]
    run = pipeline_run_for(where["flow_run_id"], where["mlflow"], cfg.workspace.mlflow_experiment)
    lines.append(f"  MLflow run:       {run or 'none recorded'}  ({where['mlflow']})")
    if not where["mlflow"].startswith("http"):
        lines.append(f"                    browse: mlflow ui --backend-store-uri {where['mlflow']}")
    ui = where.get("prefect_ui")
    lines.append(
        f"  Prefect flow run: {where['flow_run_id']}"
        + (f"  {ui}/runs/flow-run/{where['flow_run_id']}" if ui else "  (ephemeral API; `make up` for the UI)")
    )
    lines.append(f"  Workspace:        {Path(cfg.workspace.root).resolve()}")
    return lines
