"""The sample-efficiency statistics on hand-made curves, against hand computations, plain loops and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from t2g_core.evaluation.bootstrap import resampled_means
from t2g_core.evaluation.sample_efficiency import (
    bootstrap_ci,
    censor,
    collapsed,
    compare,
    curve_band,
    curve_stats,
    error_at,
    eval_schedule,
    first_reached,
    headline_target,
    mean_curve,
    paired_ratio_ci,
    plateau,
    rank_key,
    ratio_ci,
    relapsed,
    share_difference,
    share_of_gain,
    steps_ratio,
    steps_to,
    summarise,
    warm_start_ratios,
)

# (steps trained, held-out error); warm start 0.8, so 0.5x = 0.4 and 0.25x = 0.2
STEADY = [(0, 0.8), (2, 0.6), (4, 0.4), (6, 0.3), (8, 0.2)]  # 0.4 at step 4 (exactly on target), 0.2 at step 8
NEVER = [(0, 0.8), (2, 0.7), (4, 0.6), (6, 0.5), (8, 0.45)]  # improves, never reaches 0.4: censored
RELAPSE = [(0, 0.8), (2, 0.3), (4, 0.5), (6, 0.6), (8, 0.5)]  # below 0.4 at step 2, back above it at the end
WORSE = [(0, 0.8), (2, 0.9), (4, 0.8)]  # ends where it started
DIP = [(0, 0.8), (2, 0.3), (4, 0.5), (6, 0.2)]  # below 0.4, back above it mid-run, recovered by the end


def _loop_percentiles(boot: list[float]) -> tuple[float, float]:
    return float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))


def test_steps_to_is_the_first_evaluation_at_or_below_the_target():
    assert steps_to(STEADY, 0.4) == 4  # at the target counts
    assert steps_to(STEADY, 0.2) == 8
    assert steps_to(STEADY, 0.59) == 4
    assert steps_to(RELAPSE, 0.4) == 2  # the first time, whatever comes after


def test_steps_to_ignores_the_warm_start_and_censors_a_run_that_never_gets_there():
    assert steps_to(STEADY, 0.9) == 2  # the warm start (0.8 <= 0.9) is not a step trained
    assert steps_to(NEVER, 0.4) is None
    assert steps_to([(0, 0.8)], 0.4) is None  # no evaluation after the warm start


def test_censored_runs_count_one_past_the_end():
    assert censor([4, None, 0, None], run_steps=8) == [4.0, 9.0, 0.0, 9.0]


@pytest.mark.parametrize(
    ("curve", "expected"),
    [
        (STEADY, False),
        (NEVER, False),  # better at the end, never at half: slow, not collapsed
        (RELAPSE, True),  # reached half, ended above it
        (WORSE, True),  # no better than the warm start
        ([(0, 0.8), (2, 0.3), (4, 0.4)], False),  # back up to exactly half: not above it
        ([(0, 0.8), (2, 0.3), (4, 0.41)], True),
        ([(0, 0.8)], True),  # never trained: final == warm start
        (DIP, True),  # a relapse mid-run counts, whatever the end
        ([(0, 0.8), (2, 0.6), (4, 0.3), (6, 0.4), (8, 0.35)], False),  # above 0.4 only before reaching it
    ],
)
def test_collapse_rule(curve, expected):
    assert collapsed(curve) is expected


def test_relapse_is_any_evaluation_above_half_after_first_reaching_it():
    assert relapsed(DIP) and relapsed(RELAPSE)
    assert not relapsed(STEADY) and not relapsed(NEVER)
    assert not relapsed(WORSE)  # never reached half: collapsed for another reason
    assert not relapsed([(0, 0.8), (1, 0.9), (2, 0.4), (3, 0.4)])  # above half only before reaching it


@pytest.mark.parametrize(
    ("steps", "every", "expected"),
    [
        (24, 2, [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24]),
        (40, 4, [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 28, 32, 36, 40]),
        (13, 3, [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13]),  # the last step is always evaluated
        (5, 2, [1, 2, 3, 4, 5]),  # shorter than the dense part
        (20, 10, [1, 2, 3, 4, 5, 6, 7, 8, 10, 20]),
    ],
)
def test_eval_schedule_is_every_step_first_then_every_n(steps, every, expected):
    assert eval_schedule(steps, every) == expected


def test_eval_schedule_refuses_an_empty_run():
    with pytest.raises(ValueError, match="steps >= 1"):
        eval_schedule(0, 2)


def test_plateau_is_the_mean_of_the_last_k_evaluations():
    assert plateau(STEADY, 3) == pytest.approx((0.4 + 0.3 + 0.2) / 3)
    assert plateau(STEADY, 1) == 0.2
    assert plateau([(0, 0.8), (2, 0.6)], 3) == 0.6  # fewer evaluations than k: all of them, never the warm start
    with pytest.raises(ValueError, match="evaluation after the warm start"):
        plateau([(0, 0.8)], 3)


def test_curve_stats_by_hand():
    s = curve_stats(STEADY, (0.5, 0.25))
    assert s.warm_start_error == 0.8 and s.final_error == 0.2
    assert s.steps_to == {0.5: 4, 0.25: 8}
    assert s.auc == pytest.approx((0.8 + 0.6 + 0.4 + 0.3 + 0.2) / 5)
    assert not s.collapsed
    assert curve_stats(RELAPSE, (0.5, 0.25)).steps_to == {0.5: 2, 0.25: None}


def test_bootstrap_ci_matches_a_plain_loop_and_scipy():
    values = [3.0, 7.0, 7.0, 13.0, 2.0, 25.0, 9.0]
    low, high = bootstrap_ci(values, n=4000, seed=0)

    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(values), size=(4000, len(values)))
    boot = [sum(values[i] for i in row) / len(values) for row in idx]
    assert (low, high) == pytest.approx(_loop_percentiles(boot), rel=1e-12)

    ref = stats.bootstrap(
        (np.array(values),), np.mean, n_resamples=4000, method="percentile", rng=np.random.default_rng(0)
    ).confidence_interval
    assert (low, high) == pytest.approx((ref.low, ref.high), rel=1e-12)  # same resamples; q=2.5 vs 2.5000000000000027
    assert low < np.mean(values) < high


def test_bootstrap_ci_needs_two_values():
    assert all(np.isnan(x) for x in bootstrap_ci([4.0]))
    assert all(np.isnan(x) for x in bootstrap_ci([]))


def test_ratio_ci_resamples_the_two_arms_independently_numerator_first():
    num, den = [2.0, 4.0, 9.0, 9.0], [6.0, 8.0, 9.0, 12.0, 12.0]
    low, high = ratio_ci(num, den, n=3000, seed=5)

    rng = np.random.default_rng(5)
    idx_a = rng.integers(0, len(num), size=(3000, len(num)))
    idx_b = rng.integers(0, len(den), size=(3000, len(den)))
    boot = [
        (sum(num[i] for i in a) / len(num)) / (sum(den[j] for j in b) / len(den))
        for a, b in zip(idx_a, idx_b, strict=True)
    ]
    assert (low, high) == pytest.approx(_loop_percentiles(boot), rel=1e-12)
    assert low < np.mean(num) / np.mean(den) < high


def test_paired_ratio_ci_resamples_seeds_the_pairs_together():
    num, den = [2.0, 4.0, 9.0, 7.0], [6.0, 8.0, 9.0, 12.0]
    low, high = paired_ratio_ci(num, den, n=3000, seed=5)

    idx = np.random.default_rng(5).integers(0, len(num), size=(3000, len(num)))
    boot = [sum(num[i] for i in row) / sum(den[i] for i in row) for row in idx]  # one seed draw for both arms
    assert (low, high) == pytest.approx(_loop_percentiles(boot), rel=1e-12)
    assert low < np.mean(num) / np.mean(den) < high
    # runs that move together across seeds: pairing removes the between-seed spread the independent interval keeps
    together = [1.0, 2.0, 3.0, 4.0]
    assert paired_ratio_ci(together, [2 * x for x in together]) == (0.5, 0.5)
    low, high = ratio_ci(together, [2 * x for x in together])
    assert low < 0.45 and high > 0.55


def test_ratio_of_constant_arms_is_exact():
    assert ratio_ci([4.0, 4.0, 4.0], [2.0, 2.0]) == (2.0, 2.0)


def test_steps_ratio_censors_both_arms():
    # numerator [2, None] -> [2, 10], mean 6; denominator [4, 6], mean 5
    r = steps_ratio([2, None], [4, 6], run_steps=9)
    assert r["ratio"] == pytest.approx(6 / 5)
    assert r["ci95"] == ratio_ci([2.0, 10.0], [4.0, 6.0])


def test_summarise_by_hand():
    out = summarise([STEADY, NEVER, RELAPSE], run_steps=8, fractions=(0.5, 0.25))
    assert out["n_runs"] == 3 and out["collapsed"] == 1 and out["relapsed"] == 1  # RELAPSE
    assert out["steps_to_0.5"] == [4, None, 2] and out["reached_0.5"] == 2
    assert out["steps_to_0.5_mean"] == pytest.approx((4 + 9 + 2) / 3)  # NEVER counted as 8 + 1
    assert out["steps_to_0.5_ci95"] == bootstrap_ci([4.0, 9.0, 2.0])
    assert out["steps_to_0.25"] == [8, None, None] and out["reached_0.25"] == 1
    assert out["steps_to_0.25_mean"] == pytest.approx((8 + 9 + 9) / 3)
    assert out["final_error"] == [0.2, 0.45, 0.5]
    assert out["final_error_mean"] == pytest.approx(1.15 / 3)
    assert out["final_error_ci95"] == bootstrap_ci([0.2, 0.45, 0.5])
    aucs = [np.mean([e for _, e in c]) for c in (STEADY, NEVER, RELAPSE)]
    assert out["auc_mean"] == pytest.approx(np.mean(aucs))
    assert out["warm_start_error_mean"] == pytest.approx(0.8)
    plateaus = [(0.4 + 0.3 + 0.2) / 3, (0.6 + 0.5 + 0.45) / 3, (0.5 + 0.6 + 0.5) / 3]
    assert out["plateau"] == pytest.approx(plateaus) and out["plateau_k"] == 3
    assert out["plateau_mean"] == pytest.approx(np.mean(plateaus))
    assert out["plateau_ci95"] == bootstrap_ci(out["plateau"])
    assert out["plateau_fraction_mean"] == pytest.approx(np.mean(plateaus) / 0.8)
    assert summarise([STEADY], run_steps=8, fractions=(0.5,), plateau_k=1)["plateau"] == [0.2]


def _arm(steps_to_half: list[int | None], auc: float) -> dict:
    reached = [s for s in steps_to_half if s is not None]
    mean = float(np.mean(censor(steps_to_half, 8)))
    return {"steps_to_0.5": steps_to_half, "steps_to_0.5_mean": mean, "auc_mean": auc, "reached_0.5": len(reached)}


def test_compare_picks_the_best_of_each_side_and_takes_ratios_to_the_scalar_one():
    table = {
        "scalar": _arm([6, 8], auc=0.5),  # mean 7
        "scalar_rloo": _arm([4, None], auc=0.6),  # mean (4 + 9) / 2 = 6.5: the denominator
        "span": _arm([2, 4], auc=0.4),  # mean 3
        "span_local": _arm([3, 3], auc=0.3),  # mean 3 as well, lower AUC: the best span arm
        "dense": _arm([1, 1], auc=0.1),  # best overall, but dense is only the fallback
    }
    out = compare(table, 8, (0.5,), ("scalar", "uniform", "scalar_rloo"), ("span", "span_local"), ("dense",))
    row = out["0.5"]
    assert row["denominator"] == "scalar_rloo" and row["best_span"] == "span_local"
    assert set(row["ratios"]) == set(table)
    assert row["ratios"]["span_local"]["ratio"] == pytest.approx(3 / 6.5)
    assert row["ratios"]["scalar"]["ratio"] == pytest.approx(7 / 6.5)
    assert row["ratios"]["scalar_rloo"]["ratio"] == 1.0
    assert row["ratios"]["span"]["ci95"] == ratio_ci([2.0, 4.0], [4.0, 9.0])
    assert rank_key(table["span_local"], 0.5) < rank_key(table["span"], 0.5)


def test_compare_falls_back_and_skips_when_a_side_is_missing():
    table = {"scalar": _arm([6, 8], auc=0.5), "dense": _arm([1, 1], auc=0.1)}
    spans, scalars = ("span", "span_local"), ("scalar", "scalar_rloo")
    assert compare(table, 8, (0.5,), scalars, spans, ("dense",))["0.5"]["best_span"] == "dense"
    assert compare(table, 8, (0.5,), scalars, spans) == {}  # no span arm and no fallback
    assert compare({"span": table["dense"]}, 8, (0.5,), scalars, spans) == {}  # no scalar arm


def test_curve_band_keeps_the_steps_every_run_has_and_resamples_whole_runs():
    a = [(0, 0.8), (2, 0.6), (4, 0.4)]
    b = [(0, 0.6), (2, 0.2), (3, 0.5), (4, 0.2)]  # step 3 only here: dropped
    steps, mean, low, high = curve_band([a, b], n=500, seed=1)
    assert steps == [0, 2, 4]
    np.testing.assert_allclose(mean, [0.7, 0.4, 0.3])
    rng = np.random.default_rng(1)
    rows = [[0.8, 0.6, 0.4], [0.6, 0.2, 0.2]]
    idx = rng.integers(0, 2, size=(500, 2))
    for k in range(3):
        boot = [(rows[i][k] + rows[j][k]) / 2 for i, j in idx]
        assert (low[k], high[k]) == pytest.approx(_loop_percentiles(boot), rel=1e-12)


def test_resampled_means_draws_the_same_rows_for_every_trailing_column():
    mat = np.arange(12, dtype=float).reshape(4, 3)  # (m, columns)
    both = resampled_means(mat, 50, np.random.default_rng(3))
    assert both.shape == (50, 3)
    for k in range(3):
        np.testing.assert_array_equal(both[:, k], resampled_means(mat[:, k], 50, np.random.default_rng(3)))


def test_warm_start_ratios_take_the_pooled_arms_on_each_warm_start_and_check_robustness():
    # pooled: span [2, 2, 4, 4] (mean 3) over scalar [6, 6, 6, 6] (mean 6) = 0.5
    pooled = {"scalar": _arm([6, 6, 6, 6], 0.5), "span": _arm([2, 2, 4, 4], 0.3)}
    comparison = compare(pooled, 8, (0.5,), ("scalar",), ("span",))
    agree = {
        "A": {"scalar": _arm([6, 6], 0.5), "span": _arm([2, 4], 0.3)},
        "C": {"scalar": _arm([6, 6], 0.5), "span": _arm([4, 2], 0.3)},
    }
    out = warm_start_ratios(comparison, agree, 8)["0.5"]
    assert out["arm"] == "span" and out["denominator"] == "scalar" and out["pooled"] == pytest.approx(0.5)
    assert out["per_warm_start"]["A"] == steps_ratio([2, 4], [6, 6], 8)  # (2 + 4) / 2 / 6 = 0.5
    assert out["per_warm_start"]["A"]["ci95"] == ratio_ci([2.0, 4.0], [6.0, 6.0])
    assert out["robust"]  # 0.5 inside [2/6, 4/6] on both
    split = {
        "A": {"scalar": _arm([6, 6], 0.5), "span": _arm([2, 2], 0.3)},
        "C": {"scalar": _arm([6, 6], 0.5), "span": _arm([4, 4], 0.3)},
    }
    out = warm_start_ratios(comparison, split, 8)["0.5"]
    assert out["per_warm_start"]["A"]["ratio"] == pytest.approx(1 / 3) and out["per_warm_start"]["A"]["ci95"] == (
        pytest.approx(1 / 3),
        pytest.approx(1 / 3),
    )
    assert not out["robust"]  # 0.5 is outside A's [1/3, 1/3] and C's [2/3, 2/3]


def test_headline_target_is_the_first_robust_one_in_order_of_preference():
    by_ws = {"0.5": {"robust": True}, "0.25": {"robust": False}}
    assert headline_target(by_ws, (0.25, 0.5)) == "0.5"
    assert headline_target({**by_ws, "0.25": {"robust": True}}, (0.25, 0.5)) == "0.25"
    assert headline_target({"0.5": {"robust": False}}, (0.25, 0.5)) is None


# the oracle's two runs: mean warm start 0.8, mean curve 0.8, 0.5, 0.3, 0.15 -> first at or below 0.2 at step 3
ORACLE = [[(0, 0.9), (1, 0.5), (2, 0.3), (3, 0.1)], [(0, 0.7), (1, 0.5), (2, 0.3), (3, 0.2)]]
TAGGER = [
    [(0, 0.9), (1, 0.6), (2, 0.4), (3, 0.3)],
    [(0, 0.7), (1, 0.5), (2, 0.5), (3, 0.4)],
    [(0, 0.8), (1, 0.8), (2, 0.2), (3, 0.5)],
]


def test_mean_curve_and_the_step_the_reference_first_reaches_a_fraction():
    assert mean_curve(ORACLE) == [(0, pytest.approx(0.8)), (1, 0.5), (2, 0.3), (3, pytest.approx(0.15))]
    assert mean_curve([[(0, 1.0), (1, 0.5), (2, 0.4)], [(0, 0.6), (2, 0.2)]]) == [(0, 0.8), (2, pytest.approx(0.3))]
    assert first_reached(ORACLE, 0.25) == 3  # 0.15 <= 0.2; 0.3 at step 2 is not
    assert first_reached(ORACLE, 0.5) == 2  # 0.3 <= 0.4
    assert first_reached(ORACLE, 0.1) is None


def test_share_of_gain_at_the_reference_step_by_hand():
    out = share_of_gain(TAGGER, ORACLE, step=3)
    # tagger gains 0.9 - 0.3, 0.7 - 0.4, 0.8 - 0.5 = 0.6, 0.3, 0.3 (mean 0.4); oracle 0.8, 0.5 (mean 0.65)
    assert out["gains"] == pytest.approx([0.6, 0.3, 0.3]) and out["reference_gains"] == pytest.approx([0.8, 0.5])
    assert out["share"] == pytest.approx(0.4 / 0.65) and out["step"] == 3
    assert out["ci95"] == ratio_ci(out["gains"], out["reference_gains"])
    low, high = out["ci95"]
    assert 0.3 / 0.8 <= low < out["share"] < high <= 0.6 / 0.5  # inside the extremes a resample can reach


def test_share_of_gain_paired_by_seed_and_the_difference_of_two_shares_by_hand():
    tagger = TAGGER[:2]  # the first two runs share seeds 0 and 1 with the oracle's
    out = share_of_gain(tagger, ORACLE, step=3, paired=True)
    assert out["share"] == pytest.approx((0.6 + 0.3) / (0.8 + 0.5)) and out["paired"]
    assert out["ci95"] == paired_ratio_ci(out["gains"], out["reference_gains"])
    better = [[(0, 0.9), (3, 0.2)], [(0, 0.7), (3, 0.2)]]  # gains 0.7, 0.5
    diff = share_difference(better, tagger, ORACLE, step=3)
    # (mean(0.7 - 0.6, 0.5 - 0.3)) / mean(0.8, 0.5) = 0.15 / 0.65
    assert diff["difference"] == pytest.approx(0.15 / 0.65) and diff["step"] == 3
    diffs = [(0.9 - 0.2) - (0.9 - 0.3), (0.7 - 0.2) - (0.7 - 0.4)]
    assert diff["ci95"] == paired_ratio_ci(diffs, [0.9 - 0.1, 0.7 - 0.2])
    assert diff["ci95"][0] > 0  # every seed gained more with the better arm
    with pytest.raises(ValueError, match="pairs runs by seed"):
        share_difference(better, tagger, ORACLE[:1], step=3)


def test_share_of_gain_needs_an_evaluation_at_the_step():
    assert error_at(ORACLE[0], 2) == 0.3
    with pytest.raises(ValueError, match="no evaluation at step 4"):
        share_of_gain(TAGGER, ORACLE, step=4)


def test_share_of_no_gain_is_undefined():
    flat = [[(0, 0.8), (1, 0.8)], [(0, 0.6), (1, 0.6)]]
    out = share_of_gain([[(0, 0.8), (1, 0.5)]], flat, step=1)
    assert np.isnan(out["share"]) and all(np.isnan(x) for x in out["ci95"])
    assert out["gains"] == pytest.approx([0.3]) and out["reference_gains"] == [0.0, 0.0]
