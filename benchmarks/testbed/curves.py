"""Held-out curves of PPO runs, as the PPO benchmarks report them: a run's curve, the per-arm table and figure, the
mean curves of a summary, and the plateau diagnosis (what the final policies still get wrong).

A run is the record a benchmark keeps (``warm_eval``: the warm start's held-out evaluation; ``history``: one row per
step, the evaluated ones with ``eval/task_error``; ``responses``: the held-out responses kept, by steps trained,
as JSON keeps them: string keys). The statistics are :mod:`t2g_core.evaluation.sample_efficiency`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from t2g_core.evaluation import sample_efficiency as se


def curve(run: dict) -> list[tuple[int, float]]:
    """(PPO steps trained, held-out error): the warm start at 0, then after each evaluated step."""
    pts = [(0, run["warm_eval"]["eval/task_error"])]
    return pts + [(h["step"] + 1, h["eval/task_error"]) for h in run["history"] if "eval/task_error" in h]


def arm_curves(runs: list[dict], arm: str) -> list[list[tuple[int, float]]]:
    return [curve(r) for r in runs if r["arm"] == arm]


def plot_curves(runs: list[dict], arms: Sequence[str], path: Path, title: str, ylabel: str, fractions) -> None:
    """Each arm's mean held-out curve with its 95% bootstrap band; dashed lines at ``fractions`` of the mean
    warm-start error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for k, arm in enumerate(arms):
        curves = arm_curves(runs, arm)
        steps, mean, lo, hi = se.curve_band(curves)
        ax.plot(steps, mean, color=f"C{k % 10}", label=f"{arm} ({len(curves)} runs)", lw=1.6)
        ax.fill_between(steps, lo, hi, color=f"C{k % 10}", alpha=0.15)
    err0 = statistics.fmean(r["warm_eval"]["eval/task_error"] for r in runs)
    for f in fractions:
        ax.axhline(f * err0, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("PPO steps trained")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def mean_curves(runs: list[dict], arms: Sequence[str]) -> dict[str, dict]:
    """Per arm the mean held-out curve and its 95% band, as a summary JSON keeps it."""
    out = {}
    for arm in arms:
        steps, mean, lo, hi = se.curve_band(arm_curves(runs, arm))
        out[arm] = {"steps": steps, "mean": mean.tolist(), "ci95_low": lo.tolist(), "ci95_high": hi.tolist()}
    return out


ARM_KEYS = ("n_runs", "collapsed", "relapsed", "final_error_mean", "final_error_ci95", "plateau_k", "plateau_mean")
ARM_KEYS += ("plateau_ci95", "plateau_fraction_mean", "plateau_fraction_ci95", "warm_start_error_mean")


def arm_row(summary: dict, fractions) -> dict:
    """The part of a :func:`~t2g_core.evaluation.sample_efficiency.summarise` output a summary JSON keeps."""
    per_target = ("steps_to_{f}", "steps_to_{f}_mean", "steps_to_{f}_ci95", "reached_{f}")
    return {k: summary[k] for k in ARM_KEYS} | {
        p.format(f=f): summary[p.format(f=f)] for f in fractions for p in per_target
    }


def print_arms(table: dict, fractions, label=lambda arm, a: "") -> None:
    """One line per arm: steps to each target, plateau, collapses."""
    for arm, a in table.items():
        parts = [f"{arm:20s} {label(arm, a)}"]
        for f in fractions:
            lo, hi = a[f"steps_to_{f}_ci95"]
            parts.append(f"to {f}x: {a[f'steps_to_{f}_mean']:5.1f} [{lo:4.1f}, {hi:4.1f}] ({a[f'reached_{f}']})")
        lo, hi = a["plateau_ci95"]
        parts.append(f"plateau {a['plateau_mean']:.3f} [{lo:.3f}, {hi:.3f}] collapsed {a['collapsed']}/{a['n_runs']}")
        if ev := a.get("explained_variance"):
            parts.append(f"critic EV {ev['mean']:.2f} [{ev['min']:.2f}, {ev['max']:.2f}]")
        print(" | ".join(parts))


def print_comparison(comparison: dict, by_ws: dict) -> None:
    """One line per target: the best span arm over its denominator, pooled and on each warm start."""
    for f, row in comparison.items():
        r, ws = row["ratios"][row["best_span"]], by_ws[f]
        per = ", ".join(f"{w} {x['ratio']:.2f}" for w, x in ws["per_warm_start"].items())
        print(
            f"steps to {f}x: {row['best_span']} / {row['denominator']} = {r['ratio']:.2f} [{r['ci95'][0]:.2f}, "
            f"{r['ci95'][1]:.2f}]; per warm start {per}; {'robust' if ws['robust'] else 'NOT robust'}"
        )


def print_critic_ratios(critics: dict) -> None:
    """One line per :func:`critic_ratios` row."""
    for arm, row in critics.items():
        parts = [f"to {f}x {r['ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]" for f, r in row.items()]
        print(f"critic {arm} / {arm.partition(':')[0]} (the default critic): {'; '.join(parts)}")


def explained_variance(runs: list[dict]) -> dict | None:
    """The critic's explained variance of the returns (``value/explained_variance``, measured on each step's batch
    before its update): each run's mean over its steps, then the mean and range over runs; None without a critic."""
    per_run = [
        statistics.fmean(ev)
        for r in runs
        if (ev := [h["value/explained_variance"] for h in r["history"] if "value/explained_variance" in h])
    ]
    if not per_run:
        return None
    return {"mean": statistics.fmean(per_run), "min": min(per_run), "max": max(per_run), "runs": len(per_run)}


def critic_ratios(table: dict, arms: Sequence[str], steps: int, fractions) -> dict:
    """Each arm ``ARM:VALUE_MODEL`` against the same ARM with PPOConfig's default critic (when both ran): mean steps to
    each target over the default's, with 95% intervals: the figure a change of the default critic is judged on."""
    return {
        arm: {
            str(f): se.steps_ratio(table[arm][f"steps_to_{f}"], table[base][f"steps_to_{f}"], steps) for f in fractions
        }
        for arm in arms
        if ":" in arm and (base := arm.partition(":")[0]) in table
    }


# ----------------------------------------------------------------------------------------------------------------
# plateau diagnosis
# ----------------------------------------------------------------------------------------------------------------


def diagnose(profile: Callable[[list], dict | None], runs: list[dict], arms: Sequence[str], steps: int) -> dict:
    """Per arm, ``profile`` (e.g. a task's ``diagnose``) of the held-out responses after the warm start ("0") and
    after the last step, all its runs pooled; arms are left out when ``profile`` has no ground truth (None)."""
    out = {}
    for arm in arms:
        at = {k: [p for r in runs if r["arm"] == arm for p in r["responses"][str(k)]] for k in (0, steps)}
        profiles = {str(k): profile(responses) for k, responses in at.items()}
        if all(p is not None for p in profiles.values()):
            out[arm] = profiles
    return out


WRONG = ("invented", "swapped", "missing")


def short_diagnosis(profiles: dict) -> dict:
    """Totals at the warm start and after the last step, and per slot after the last step the shares of responses
    whose value is invented, swapped, missing (``columns``; correct is 1 minus their sum)."""
    warm, last = profiles["0"], profiles[max(profiles, key=int)]
    slots = {s: [by[k] for k in WRONG] for s, by in last["slots"].items()}
    return {"warm_start_total": warm["total"], "final_total": last["total"], "columns": WRONG, "final_slots": slots}


def print_diagnosis(diagnosis: dict) -> None:
    if not diagnosis:
        return
    print("still wrong after the last step, share of slots (at the warm start):")
    for arm, profiles in diagnosis.items():
        warm, last = profiles["0"], profiles[max(profiles, key=int)]
        kinds = ", ".join(f"{k} {last['total'][k]:.3f} ({warm['total'][k]:.3f})" for k in WRONG)
        worst = sorted(last["slots"].items(), key=lambda kv: kv[1]["correct"])[:3]
        print(f"  {arm:20s} {kinds}; worst slots: " + ", ".join(f"{s} {1 - v['correct']:.2f}" for s, v in worst))
