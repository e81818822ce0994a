"""Evaluation reports: a markdown comparison table and PNG charts (metric bars with intervals, learning curves)."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from t2g_core.evaluation.results import EvalResults
from t2g_core.evaluation.titles import is_percent, title
from t2g_core.store import read_json, write_text_atomic


def _fmt(metric: str, value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if is_percent(metric):  # the rates titles.WORDS gives in %, and pass@k
        return f"{100 * value:.1f}"
    return f"{value:.2f}"


def _summary(results: EvalResults | Mapping[str, Any]) -> Mapping[str, Any]:
    return results.summary if isinstance(results, EvalResults) else results


def comparison_table(results: EvalResults | Mapping[str, Any]) -> str:
    """Markdown: one row per metric, a column of means per policy, then each policy's difference from the baseline
    with its bootstrap interval and a verdict (named only when the interval excludes zero). Rates are in percent."""
    summary = _summary(results)
    policies, baseline = list(summary["policies"]), summary["baseline"]
    others = [p for p in policies if p != baseline]
    level = round(100 * summary.get("confidence", 0.95))
    comps = {(c["policy"], c["metric"]): c for c in summary.get("comparisons", [])}
    metrics = list(dict.fromkeys(m for p in policies for m in summary["policies"][p]["metrics"]))
    header = ["metric", *policies] + [h for p in others for h in (f"Δ {p} vs {baseline} ({level}% CI)", "verdict")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for m in metrics:
        cells = [m] + [_fmt(m, summary["policies"][p]["metrics"].get(m, float("nan"))) for p in policies]
        for p in others:
            c = comps.get((p, m))
            diff = f"{_signed(m, c['diff'])} [{_signed(m, c['low'])}, {_signed(m, c['high'])}]" if c else ""
            cells += [diff, c["verdict"] if c else ""]
        lines.append("| " + " | ".join(cells) + " |")
    n_items = {p: summary["policies"][p]["n_items"] for p in policies}
    lines.append("")
    lines.append(
        f"task: {summary['task']}; items per policy: {', '.join(f'{p} {n}' for p, n in n_items.items())}; "
        "rates in %; verdict only when the paired-bootstrap interval excludes 0."
    )
    lines += _judge_lines(summary)
    return "\n".join(lines)


def _signed(metric: str, value: float) -> str:
    text = _fmt(metric, value)
    return text if text.startswith("-") or text == "–" else f"+{text}"


def _judge_lines(summary: Mapping[str, Any]) -> list[str]:
    judge = summary.get("judge") or {}
    lines = []
    for policy, j in judge.items():
        if not j.get("judged"):  # no rate to report, and never a "nan%"
            why = f": {j['first_error']}" if j.get("first_error") else ""
            lines.append(f"judge: {policy} vs {j['baseline']}: not judged ({j['failed']} items failed{why})")
            continue
        lines.append(
            f"judge: {policy} vs {j['baseline']}: win rate {100 * j['win_rate']:.1f}% "
            f"[{100 * j['low']:.1f}, {100 * j['high']:.1f}] ({j['wins']} wins, {j['losses']} losses, {j['ties']} ties, "
            f"{j['failed']} failed; both answer orders) -> {j['verdict']}"
        )
    return lines


def metric_bars(summary: Mapping[str, Any], path: Path) -> Path:
    """One panel per metric: each policy's mean; non-baseline bars carry the baseline mean + the diff interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies, baseline = list(summary["policies"]), summary["baseline"]
    metrics = list(dict.fromkeys(m for p in policies for m in summary["policies"][p]["metrics"]))
    comps = {(c["policy"], c["metric"]): c for c in summary.get("comparisons", [])}
    cols = min(4, len(metrics)) or 1
    rows = math.ceil(len(metrics) / cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False, layout="constrained")
    for ax, m in zip(axes.flat, metrics, strict=False):
        scale = 100.0 if is_percent(m) else 1.0  # rates in %, as the comparison table shows them
        means = [scale * summary["policies"][p]["metrics"].get(m, float("nan")) for p in policies]
        base = scale * summary["policies"][baseline]["metrics"].get(m, float("nan"))
        err = [
            [0.0, 0.0]
            if p == baseline or (p, m) not in comps
            else [
                max(0.0, means[i] - (base + scale * comps[(p, m)]["low"])),
                max(0.0, base + scale * comps[(p, m)]["high"] - means[i]),
            ]
            for i, p in enumerate(policies)
        ]
        colors = ["#999999" if p == baseline else "#3b75af" for p in policies]
        ax.bar(range(len(policies)), means, yerr=list(zip(*err, strict=True)), capsize=4, color=colors)
        ax.set_xticks(range(len(policies)), policies, rotation=30, ha="right", fontsize=8)
        _panel_title(ax, m)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    level = round(100 * summary.get("confidence", 0.95))
    fig.suptitle(f"{summary['task']}: means; error bars = {level}% CI of the difference from {baseline}", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def load_history(path: str | Path) -> pd.DataFrame:
    """A PPO metric history: JSON (list of dicts, or {"history": [...]}) / JSONL / CSV / Parquet with a ``step``
    column."""
    p = Path(path)
    if p.suffix == ".parquet":
        df = pd.read_parquet(p)
    elif p.suffix == ".csv":
        df = pd.read_csv(p)
    elif p.suffix == ".jsonl":
        df = pd.read_json(p, lines=True)
    else:
        data = read_json(p)
        df = pd.DataFrame(data.get("history", data) if isinstance(data, dict) else data)
    if "step" not in df.columns:
        df = df.reset_index(names="step")
    return df


CURVE_PRIORITY = ("eval/task_", "task/", "reward/total_mean", "kl/mean", "eval/", "reward/")
AFTER_UPDATE = "eval/"  # PPO evaluates the held-out prompts after a step's update; a step's other metrics are of its
# rollouts (drawn before the update) or of the update itself
UPDATES_AXIS = "PPO updates done"
TITLE_CHARS = 34  # characters per title line that fit a panel about 3.3 inches wide at 8 points


def _curve_rank(metric: str) -> int:
    return next((i for i, prefix in enumerate(CURVE_PRIORITY) if metric.startswith(prefix)), len(CURVE_PRIORITY))


def _panel_title(ax, metric: str) -> None:
    """The metric in words, wrapped to the panel's width (matplotlib's own ``wrap`` wraps at the figure's edge, so a
    long title ran into its neighbour's)."""
    ax.set_title(textwrap.fill(title(metric), TITLE_CHARS), fontsize=8)


def updates_done(metric: str, steps: pd.Series) -> pd.Series:
    """The policy's PPO updates when ``metric`` was measured at each step: s for a step's rollouts, s + 1 for the
    held-out evaluation after its update."""
    return steps + 1 if metric.startswith(AFTER_UPDATE) else steps


def learning_curves(histories: Mapping[str, pd.DataFrame], path: Path, max_panels: int = 8) -> Path | None:
    """One panel per metric of the runs, task and reward metrics first (up to ``max_panels``), one line per run, over
    the updates the policy had when measured (:func:`updates_done`). Metrics recorded only on some steps (periodic
    evals) are drawn through the steps that have them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numeric = {name: df.select_dtypes("number") for name, df in histories.items() if len(df)}
    metrics = list(dict.fromkeys(c for df in numeric.values() for c in df.columns if c != "step"))
    metrics = sorted(metrics, key=_curve_rank)[:max_panels]  # stable: file order within a rank
    if not metrics:
        return None
    cols = min(4, len(metrics))
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False, layout="constrained")
    for ax, m in zip(axes.flat, metrics, strict=False):
        scale = 100.0 if is_percent(m) else 1.0
        for name, df in numeric.items():
            if m in df.columns:
                have = df[m].notna()
                xs, ys = updates_done(m, df.loc[have, "step"]), scale * df.loc[have, m]
                ax.plot(xs, ys, marker="." if have.sum() < 20 else None, label=name)
        _panel_title(ax, m)
        ax.set_xlabel(UPDATES_AXIS, fontsize=8)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


CURVES_NOTE = (
    f"Curves over the policy's {UPDATES_AXIS}: a step's rollouts (training curves) are drawn before its update, "
    "its held-out evaluation after it."
)

REWARD_LABELS = {
    "source": "reward source",
    "kind": "reward model kind",
    "rm_truth_poor_char_f1": "reward model: poor-span F1 against the truth (held-out, characters)",
    "rm_truth_recall_invented": "reward model: recall of invented values (held-out)",
    "rm_truth_span_f1": "reward model: span F1 against the truth (held-out, IoU >= 0.5)",
    "rm_span_f1": "reward model: span F1 against the annotations (held-out)",
    "rm_unmatched_span_rate": "reward model: quotes that match no text (held-out)",
    "rollout_unmatched_rate": "quotes that matched no text, on PPO's rollouts",
    "score_share": "share of the PPO step spent scoring rollouts",
}


def reward_table(reward: Mapping[str, Any]) -> str:
    """The reward the policy learnt from, as a Markdown table (source, reward model quality, scoring share)."""
    rows = ["| | |", "|---|---|"]
    for key, label in REWARD_LABELS.items():
        if key in reward:
            value = reward[key]
            shown = f"{100 * value:.1f}%" if key in ("score_share",) else value
            rows.append(f"| {label} | {shown if isinstance(shown, str) else f'{shown:.3f}'} |")
    return "\n".join(rows)


def write_report(
    results: EvalResults,
    out_dir: str | Path,
    histories: Mapping[str, pd.DataFrame] | None = None,
    reward: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``report.md``, ``metrics.png`` and (with PPO histories) ``learning_curves.png`` into ``out_dir``; with
    ``reward``, a section on the reward PPO learnt from."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"metrics_png": metric_bars(results.summary, out / "metrics.png")}
    md = [
        f"# Policy evaluation ({results.summary['task']})",
        "",
        comparison_table(results),
        "",
        "![metrics](metrics.png)",
    ]
    if histories:
        curves = learning_curves(histories, out / "learning_curves.png")
        if curves is not None:
            files["learning_curves_png"] = curves
            md += ["", "![learning curves](learning_curves.png)", "", CURVES_NOTE]
    if reward:
        md += ["", "## The reward PPO learnt from", "", reward_table(reward)]
    settings = {p: e.get("settings", {}) for p, e in results.summary["policies"].items()}
    md += ["", "## Generation settings", "", "```json", json.dumps(settings, indent=2), "```"]
    write_text_atomic(out / "report.md", "\n".join(md) + "\n")
    files["report_md"] = out / "report.md"
    return files
