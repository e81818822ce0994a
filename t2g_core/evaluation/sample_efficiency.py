"""Sample efficiency of PPO runs from their held-out error curves: steps to a target, censoring, collapse, plateau,
intervals, and the share of a reference arm's gain (definitions: docs/benchmarks.md, "Sample-efficiency statistics").
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


def eval_schedule(steps: int, every: int, dense: int = 8) -> list[int]:
    """Steps after which a run is evaluated (besides step 0): each of the first ``dense``, every ``every``-th, last."""
    if steps < 1 or every < 1:
        raise ValueError(f"eval_schedule needs steps >= 1 and every >= 1, got steps={steps}, every={every}")
    later = range(every * (dense // every + 1), steps + 1, every)
    return sorted({*range(1, min(dense, steps) + 1), *later, steps})


def relapsed(curve: Curve) -> bool:
    """After its first evaluation at or below half the warm-start error, some later evaluation is above half."""
    half = 0.5 * curve[0][1]
    reached = steps_to(curve, half)
    return reached is not None and any(err > half for s, err in curve[1:] if s > reached)


def collapsed(curve: Curve) -> bool:
    """Ended no better than the warm start, or relapsed above half of it anywhere after having got there."""
    return curve[-1][1] >= curve[0][1] or relapsed(curve)


def plateau(curve: Curve, k: int = 3) -> float:
    """Mean error of the last ``k`` evaluations after the warm start (all of them when there are fewer)."""
    if k < 1 or len(curve) < 2:
        raise ValueError(f"plateau needs k >= 1 and an evaluation after the warm start (k={k}, {len(curve)} points)")
    return statistics.fmean(err for _, err in curve[1:][-k:])


@dataclass(frozen=True)
class CurveStats:
    warm_start_error: float
    steps_to: dict[float, int | None]  # fraction of the warm-start error -> steps to it (None: censored)
    final_error: float
    auc: float  # mean error over the curve's points, the warm start included
    collapsed: bool
    relapsed: bool
    plateau: float  # mean error of the last plateau_k evaluations


def curve_stats(curve: Curve, fractions: Sequence[float], plateau_k: int = 3) -> CurveStats:
    err0 = curve[0][1]
    return CurveStats(
        warm_start_error=err0,
        steps_to={f: steps_to(curve, f * err0) for f in fractions},
        final_error=curve[-1][1],
        auc=statistics.fmean(err for _, err in curve),
        collapsed=collapsed(curve),
        relapsed=relapsed(curve),
        plateau=plateau(curve, plateau_k) if len(curve) > 1 else err0,
    )


def bootstrap_ci(values: Sequence[float], n: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean (NaN, NaN with fewer than 2 values)."""
    if len(values) < 2:
        return (float("nan"), float("nan"))
    means = resampled_means(np.asarray(values, dtype=float), n, np.random.default_rng(seed))  # (n,)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def ratio_ci(num: Sequence[float], den: Sequence[float], n: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of mean(num) / mean(den), the two samples resampled independently."""
    rng = np.random.default_rng(seed)  # one generator: the numerator's resamples first
    r = resampled_means(np.asarray(num, dtype=float), n, rng) / resampled_means(np.asarray(den, dtype=float), n, rng)
    return float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def paired_ratio_ci(num: Sequence[float], den: Sequence[float], n: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of mean(num) / mean(den), the pairs (num_i, den_i) resampled together: runs
    of two arms paired by seed (same seed, same warm start), the seed the unit resampled."""
    pairs = np.column_stack([np.asarray(num, dtype=float), np.asarray(den, dtype=float)])  # (runs, 2)
    means = resampled_means(pairs, n, np.random.default_rng(seed))  # (n, 2)
    r = means[:, 0] / means[:, 1]
    return float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def curve_band(
    curves: Sequence[Curve], n: int = 2000, seed: int = 0
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """The runs' mean curve with its 95% band (resampling whole runs): (common steps, mean, low, high)."""
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


def summarise(curves: Sequence[Curve], run_steps: int, fractions: Sequence[float], plateau_k: int = 3) -> dict:
    """One arm's runs: collapses and relapses; per fraction the raw and censored-mean steps with an interval and the
    runs that got there; final errors and plateaus (also relative to the warm start) with intervals; means."""
    stats = [curve_stats(c, fractions, plateau_k) for c in curves]
    out = {
        "n_runs": len(stats),
        "collapsed": sum(s.collapsed for s in stats),
        "relapsed": sum(s.relapsed for s in stats),
    }
    for f in fractions:
        raw = [s.steps_to[f] for s in stats]
        vals = censor(raw, run_steps)
        out[f"steps_to_{f}"] = raw
        out[f"steps_to_{f}_mean"] = statistics.fmean(vals)
        out[f"steps_to_{f}_ci95"] = bootstrap_ci(vals)
        out[f"reached_{f}"] = sum(x is not None for x in raw)
    finals, plateaus = [s.final_error for s in stats], [s.plateau for s in stats]
    relative = [s.plateau / s.warm_start_error if s.warm_start_error else float("nan") for s in stats]
    return out | {
        "final_error": finals,
        "final_error_mean": statistics.fmean(finals),
        "final_error_ci95": bootstrap_ci(finals),
        "plateau_k": plateau_k,
        "plateau": plateaus,
        "plateau_mean": statistics.fmean(plateaus),
        "plateau_ci95": bootstrap_ci(plateaus),
        "plateau_fraction_mean": statistics.fmean(relative),
        "plateau_fraction_ci95": bootstrap_ci(relative),
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


def warm_start_ratios(comparison: dict, tables: dict[str, dict[str, dict]], run_steps: int) -> dict:
    """Per fraction of a pooled :func:`compare`: its best span arm over its denominator on each warm start's runs
    alone (``tables``: warm start -> arm -> :func:`summarise`), and whether the pooled ratio is ``robust``."""
    out = {}
    for f, row in comparison.items():
        arm, den = row["best_span"], row["denominator"]
        key = f"steps_to_{f}"
        per = {ws: steps_ratio(t[arm][key], t[den][key], run_steps) for ws, t in tables.items()}
        pooled = row["ratios"][arm]["ratio"]
        robust = all(r["ci95"][0] <= pooled <= r["ci95"][1] for r in per.values())
        out[f] = {"arm": arm, "denominator": den, "pooled": pooled, "per_warm_start": per, "robust": robust}
    return out


def headline_target(by_warm_start: dict, preference: Sequence[float]) -> str | None:
    """The first fraction in ``preference`` robust across warm starts (:func:`warm_start_ratios`), or None."""
    return next((str(f) for f in preference if by_warm_start.get(str(f), {}).get("robust")), None)


def mean_curve(curves: Sequence[Curve]) -> list[tuple[int, float]]:
    """(step, mean error) at the steps every curve was evaluated at."""
    points = [dict(c) for c in curves]
    steps = sorted(set.intersection(*(set(p) for p in points)))
    return [(s, statistics.fmean(p[s] for p in points)) for s in steps]


def first_reached(curves: Sequence[Curve], fraction: float) -> int | None:
    """The first step at which the runs' mean curve is at or below ``fraction`` of its warm start (None: never)."""
    mean = mean_curve(curves)
    return steps_to(mean, fraction * mean[0][1])


def error_at(curve: Curve, step: int) -> float:
    found = [err for s, err in curve if s == step]
    if not found:
        raise ValueError(f"the curve has no evaluation at step {step} (evaluated at {[s for s, _ in curve]})")
    return found[0]


def gains_at(curves: Sequence[Curve], step: int) -> list[float]:
    """Each run's gain at ``step``: its warm-start error minus its error there."""
    return [c[0][1] - error_at(c, step) for c in curves]


def share_of_gain(arm: Sequence[Curve], reference: Sequence[Curve], step: int, *, paired: bool = False) -> dict:
    """The arm's mean gain (warm-start error minus the error at ``step``) over the reference arm's, with its 95%
    interval and the per-run gains; NaN when the reference gained nothing. ``paired``: the k-th runs of the two arms
    share a seed and warm start, and the interval resamples seeds (:func:`paired_ratio_ci`)."""
    gains, ref = gains_at(arm, step), gains_at(reference, step)
    if statistics.fmean(ref) == 0:
        share, ci = float("nan"), (float("nan"), float("nan"))
    else:
        share = statistics.fmean(gains) / statistics.fmean(ref)
        ci = paired_ratio_ci(gains, ref) if paired else ratio_ci(gains, ref)
    return {"step": step, "share": share, "ci95": ci, "paired": paired, "gains": gains, "reference_gains": ref}


def share_difference(arm: Sequence[Curve], other: Sequence[Curve], reference: Sequence[Curve], step: int) -> dict:
    """(mean gain of ``arm`` - mean gain of ``other``) / the reference's mean gain at ``step``, with its 95% interval
    resampling seeds (the k-th runs of the three arms share one)."""
    diffs = [a - b for a, b in zip(gains_at(arm, step), gains_at(other, step), strict=True)]
    ref = gains_at(reference, step)
    if len(ref) != len(diffs):
        raise ValueError(f"share_difference pairs runs by seed: {len(diffs)} pairs but {len(ref)} reference runs")
    return {
        "step": step,
        "difference": statistics.fmean(diffs) / statistics.fmean(ref),
        "ci95": paired_ratio_ci(diffs, ref),
    }
