"""Sample efficiency of PPO runs from their held-out error curves: steps to a target, censoring, collapse, intervals.

A run's curve is ``[(0, e_0), (s_1, e_1), ...]``: the held-out task error of the warm start, then the error after
``s_k`` steps trained at each evaluation. For a fraction ``f`` of the warm-start error

    steps_to(f) = min { s_k : k >= 1, e_k <= f * e_0 }        (None when no evaluation gets there: censored)

Means and intervals count a censored run as ``run_steps + 1`` (one past the end of the run), so a run that never gets
there always ranks behind one that does on its last step; the number of runs that got there is reported beside.

A run **collapsed** when it ends no better than its warm start (``e_last >= e_0``), or when it reached half the
warm-start error and had relapsed above it by the end (``e_last > 0.5 e_0``).

Intervals are 95% percentile bootstraps of the mean (4000 resamples, ``bootstrap.resampled_means``). The ratio of two
arms' mean steps resamples the arms independently, numerator first, from one generator.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from t2g_core.evaluation.bootstrap import resampled_means

Curve = Sequence[tuple[int, float]]  # (steps trained, held-out error); the first point is the warm start (step 0)


def steps_to(curve: Curve, target: float) -> int | None:
    """Steps trained before the first evaluation after the warm start at or below ``target`` (None: never)."""
    return next((s for s, err in curve[1:] if err <= target), None)


def censor(steps: Sequence[int | None], run_steps: int) -> list[float]:
    """Steps-to-target with the censored runs (None) counted as ``run_steps + 1``."""
    return [float(x) if x is not None else float(run_steps + 1) for x in steps]


def collapsed(curve: Curve) -> bool:
    """Ended no better than the warm start, or back above half of it after having got there (a relapse)."""
    err0, final = curve[0][1], curve[-1][1]
    return final >= err0 or (steps_to(curve, 0.5 * err0) is not None and final > 0.5 * err0)


@dataclass(frozen=True)
class CurveStats:
    warm_start_error: float
    steps_to: dict[float, int | None]  # fraction of the warm-start error -> steps to it (None: censored)
    final_error: float
    auc: float  # mean error over the curve's points, the warm start included
    collapsed: bool


def curve_stats(curve: Curve, fractions: Sequence[float]) -> CurveStats:
    err0 = curve[0][1]
    return CurveStats(
        warm_start_error=err0,
        steps_to={f: steps_to(curve, f * err0) for f in fractions},
        final_error=curve[-1][1],
        auc=statistics.fmean(err for _, err in curve),
        collapsed=collapsed(curve),
    )


def bootstrap_ci(values: Sequence[float], n: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean (NaN, NaN with fewer than 2 values)."""
    if len(values) < 2:
        return (float("nan"), float("nan"))
    means = resampled_means(np.asarray(values, dtype=float), n, np.random.default_rng(seed))  # (n,)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def ratio_ci(num: Sequence[float], den: Sequence[float], n: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of mean(num) / mean(den), the two samples resampled independently."""
    rng = np.random.default_rng(seed)
    ra = resampled_means(np.asarray(num, dtype=float), n, rng)  # (n,)
    rb = resampled_means(np.asarray(den, dtype=float), n, rng)
    r = ra / rb
    return float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def curve_band(
    curves: Sequence[Curve], n: int = 2000, seed: int = 0
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """(steps every curve was evaluated at, mean error, 2.5th and 97.5th percentiles of n bootstrap means): the mean
    curve of a set of runs with its 95% band, resampling whole runs."""
    points = [dict(c) for c in curves]
    steps = [s for s in sorted({s for c in curves for s, _ in c}) if all(s in p for p in points)]
    mat = np.array([[p[s] for s in steps] for p in points])  # (runs, steps)
    boot = resampled_means(mat, n, np.random.default_rng(seed))  # (n, steps)
    low, high = np.percentile(boot, [2.5, 97.5], axis=0)
    return steps, mat.mean(axis=0), low, high


def steps_ratio(num: Sequence[int | None], den: Sequence[int | None], run_steps: int) -> dict:
    """Mean steps-to-target of one arm over another's, both censored, with its 95% interval."""
    a, b = censor(num, run_steps), censor(den, run_steps)
    return {"ratio": statistics.fmean(a) / statistics.fmean(b), "ci95": ratio_ci(a, b)}


def summarise(curves: Sequence[Curve], run_steps: int, fractions: Sequence[float]) -> dict:
    """One arm's runs: collapses; per fraction the raw (None = censored) and censored-mean steps with an interval and
    the number of runs that got there; final errors with an interval; mean AUC and warm-start error."""
    stats = [curve_stats(c, fractions) for c in curves]
    out = {"n_runs": len(stats), "collapsed": sum(s.collapsed for s in stats)}
    for f in fractions:
        raw = [s.steps_to[f] for s in stats]
        vals = censor(raw, run_steps)
        out[f"steps_to_{f}"] = raw
        out[f"steps_to_{f}_mean"] = statistics.fmean(vals)
        out[f"steps_to_{f}_ci95"] = bootstrap_ci(vals)
        out[f"reached_{f}"] = sum(x is not None for x in raw)
    finals = [s.final_error for s in stats]
    return out | {
        "final_error": finals,
        "final_error_mean": statistics.fmean(finals),
        "final_error_ci95": bootstrap_ci(finals),
        "auc_mean": statistics.fmean(s.auc for s in stats),
        "warm_start_error_mean": statistics.fmean(s.warm_start_error for s in stats),
    }


def rank_key(summary: dict, fraction: float) -> tuple[float, float]:
    """Better arms sort first: fewer mean steps to ``fraction`` of the warm-start error, then the lower mean AUC."""
    return summary[f"steps_to_{fraction}_mean"], summary["auc_mean"]


def compare(
    table: dict[str, dict],
    run_steps: int,
    fractions: Sequence[float],
    scalar_arms: Sequence[str],
    span_arms: Sequence[str],
    fallback_arms: Sequence[str] = (),
) -> dict:
    """Per fraction: the best-ranked of ``scalar_arms`` (the denominator), the best of ``span_arms`` (of
    ``fallback_arms`` when no span arm ran), and every arm's mean steps over the denominator's with its 95% interval.
    ``table`` maps arm -> :func:`summarise` output; a fraction is left out when either side has no arm in it."""
    out = {}
    for f in fractions:
        scalar = [a for a in scalar_arms if a in table]
        span = [a for a in span_arms if a in table] or [a for a in fallback_arms if a in table]
        if not scalar or not span:
            continue
        den = min(scalar, key=lambda a: rank_key(table[a], f))
        best = min(span, key=lambda a: rank_key(table[a], f))
        ratios = {a: steps_ratio(table[a][f"steps_to_{f}"], table[den][f"steps_to_{f}"], run_steps) for a in table}
        out[str(f)] = {"denominator": den, "best_span": best, "ratios": ratios}
    return out
