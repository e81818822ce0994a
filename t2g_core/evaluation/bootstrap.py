"""Paired bootstrap confidence interval for the difference of two policies' means on the same items.

For per-item scores ``a_i`` (baseline) and ``b_i`` (candidate) on the same n items, draw n item indices with
replacement B times, and take the (alpha/2, 1 - alpha/2) percentiles of ``mean(b[idx] - a[idx])``. The verdict names
a winner only when the interval excludes zero. Items where either score is missing (NaN) are dropped, pairwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class BootstrapResult:
    n: int  # paired items used
    mean_a: float
    mean_b: float
    diff: float  # mean(b - a)
    low: float  # lower bound of the (1 - alpha) interval for diff
    high: float
    verdict: str  # "b better" | "a better" | "no clear difference"
    confidence: float = 0.95

    def to_dict(self) -> dict:
        return asdict(self)


def resampled_means(values: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``n`` bootstrap resamples of ``values`` along its first axis: (m, ...) -> (n, ...), from one (n, m)
    draw of row indices (a fixed generator state gives the same resamples whatever the trailing shape)."""
    idx = rng.integers(0, len(values), size=(n, len(values)))  # (n, m) resampled row indices
    return values[idx].mean(axis=1)


def verdict(low: float, high: float) -> str:
    """A winner only when the interval [low, high] excludes zero (higher scores are better)."""
    if low > 0:
        return "b better"
    if high < 0:
        return "a better"
    return "no clear difference"


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], n: int = 2000, seed: int = 0, confidence: float = 0.95
) -> BootstrapResult:
    """Paired bootstrap interval of ``mean(b) - mean(a)`` over items (same order in both)."""
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.shape != b_arr.shape or a_arr.ndim != 1:
        raise ValueError(
            f"paired_bootstrap: a and b must be 1-d and the same length, got {a_arr.shape} and {b_arr.shape}"
        )
    keep = ~(np.isnan(a_arr) | np.isnan(b_arr))
    a_arr, b_arr = a_arr[keep], b_arr[keep]
    m = len(a_arr)
    if m == 0:
        nan = float("nan")
        return BootstrapResult(0, nan, nan, nan, nan, nan, "no clear difference", confidence)
    diffs = b_arr - a_arr  # (m,)
    boot = resampled_means(diffs, n, np.random.default_rng(seed))  # (n,)
    alpha = 1.0 - confidence
    low, high = (float(x) for x in np.percentile(boot, [100 * alpha / 2, 100 * (1 - alpha / 2)]))
    return BootstrapResult(
        m, float(a_arr.mean()), float(b_arr.mean()), float(diffs.mean()), low, high, verdict(low, high), confidence
    )
