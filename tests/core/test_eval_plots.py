"""The evaluation's charts as a reader sees them: panel titles that do not run into each other, and a step axis that
says when each curve was measured (a PPO step's rollouts come before its update, its held-out evaluation after)."""

from __future__ import annotations

import itertools

import matplotlib
import numpy as np
import pandas as pd
import pytest

from t2g_core.evaluation.report import learning_curves, metric_bars

matplotlib.use("Agg")
# the demo's history: its task metrics held out and on the rollouts, then reward and KL (the titles that overlapped)
DEMO_CURVES = [
    *(f"{p}{m}" for p in ("eval/task_", "task/") for m in ("error", "imprecision", "invented_rate")),
    "reward/total_mean",
    "kl/mean",
]


@pytest.fixture
def drawn(monkeypatch):
    """Each figure a plot function saves, kept open (with its renderer) for the test to measure."""
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    return figures


def _overlapping_titles(fig) -> list[tuple[str, str]]:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    titles = [(ax.title.get_text(), ax.title.get_window_extent(renderer)) for ax in fig.axes if ax.title.get_text()]
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(titles, 2) if box_a.overlaps(box_b)]


def test_learning_curve_titles_do_not_overlap(tmp_path, drawn):
    """Before: 'held-out stated facts that are wrong (%, lower is better)' ran into its neighbour (three pairs)."""
    history = pd.DataFrame({"step": range(6), **{c: np.linspace(0.5, 0.1, 6) for c in DEMO_CURVES}})
    learning_curves({"ppo": history}, tmp_path / "curves.png")
    assert _overlapping_titles(drawn[0]) == []


def test_metric_bar_titles_do_not_overlap(tmp_path, drawn):
    """The bars share the titles' wrapping (a guard: no overlap was seen here before)."""
    metrics = {m: 0.3 for m in ("fact_error", "invented_entity_rate", "reference_score", "judge_score", "rougeL")}
    policies = {p: {"metrics": metrics} for p in ("base", "ppo")}
    summary = {"task": "summarization", "baseline": "base", "policies": policies}
    metric_bars(summary, tmp_path / "metrics.png")
    assert _overlapping_titles(drawn[0]) == []


def test_the_step_axis_says_when_each_curve_was_measured(tmp_path, drawn):
    """Step s's rollouts are drawn before its update and its held-out evaluation after it: plotted over the updates
    the policy had when measured, the held-out curve starts at 1 (before: at step 0, unsaid)."""
    history = pd.DataFrame({"step": [0, 1, 2], "eval/task_error": [0.4, 0.3, 0.2], "task/error": [0.5, 0.4, 0.3]})
    learning_curves({"ppo": history}, tmp_path / "curves.png")
    axes = {ax.get_title().split(" (")[0]: ax for ax in drawn[0].axes if ax.get_title()}
    held_out, training = axes["held-out task error"], axes["training task error"]
    assert list(held_out.lines[0].get_xdata()) == [1, 2, 3] and list(training.lines[0].get_xdata()) == [0, 1, 2]
    assert all("updates" in ax.get_xlabel() for ax in (held_out, training)), held_out.get_xlabel()
