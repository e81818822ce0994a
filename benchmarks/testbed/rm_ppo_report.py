"""What bench_rm_ppo's runs show: per-arm curves and costs, each arm's share of its estimator's oracle gain, and the
controls' paired differences, the seed as the unit; the printed report."""

from __future__ import annotations

import statistics

from t2g_core.evaluation import sample_efficiency as se
from t2g_core.evaluation.bootstrap import paired_bootstrap
from testbed import curves

FRACTIONS = (0.5, 0.25)
CONTRASTS = (("refreshed", "matched"), ("refreshed", "tagger"), ("matched", "tagger"), ("refreshed_noisy", "refreshed"))
CONTRASTS += (("refreshed_matched", "matched"), ("refreshed_matched", "refreshed"), ("ensemble", "tagger"))


def split_arm(arm: str) -> tuple[str, str]:  # "SOURCE-ESTIMATOR"
    source, _, estimator = arm.rpartition("-")
    return source, estimator


def summarise(args, runs: list[dict], arms: list[str], batch_size: int) -> dict:
    table = {}
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm]
        score = sum(h["time/score"] for r in mine for h in r["history"])
        step = sum(h["time/step"] for r in mine for h in r["history"])
        n_steps = sum(len(r["history"]) for r in mine)
        table[arm] = se.summarise(curves.arm_curves(runs, arm), args.steps, FRACTIONS, args.plateau_evals) | {
            "score_share": score / step if step else float("nan"),
            "score_ms_per_response": 1000 * score / (n_steps * batch_size) if n_steps else float("nan"),
            "seconds_per_run": statistics.fmean(r["seconds"] for r in mine),
        }
    return table


def paired(runs: list[dict], *arms: str) -> list[list]:
    """Each arm's curves on the seeds all ``arms`` ran, in seed order: the k-th curves of the arms are a pair (the
    same seed from the same warm start)."""
    by_seed = [{r["seed"]: curves.curve(r) for r in runs if r["arm"] == arm} for arm in arms]
    seeds = sorted(set.intersection(*(set(b) for b in by_seed)))
    return [[b[s] for s in seeds] for b in by_seed]


def oracle_shares(args, runs: list[dict], arms: list[str]) -> dict:
    """Per arm (not the oracle), the share of the same estimator's oracle arm's gain at the step its mean curve first
    reaches 0.25x, and at the last step, paired by seed."""
    out = {}
    for arm in arms:
        name, estimator = split_arm(arm)
        oracle = f"oracle-{estimator}"
        if name == "oracle" or oracle not in arms:
            continue
        mine, ref = paired(runs, arm, oracle)
        step = se.first_reached(ref, 0.25)
        at = {"step": None, "note": "never reached 0.25x"}
        if step is not None:
            at = se.share_of_gain(mine, ref, step, paired=True)
        last = se.share_of_gain(mine, ref, args.steps, paired=True)
        out[arm] = {"oracle": oracle, "at_oracle_0.25": at, "at_last_step": last}
    return out


def contrasts(args, runs: list[dict], arms: list[str]) -> dict:
    """Per pair ``a``, ``b`` of ``CONTRASTS`` run with one estimator, paired by seed: a's final error minus b's (below
    0: a ends lower) and, when the oracle ran, a's share of the oracle's gain at its 0.25x step minus b's, each with a
    95% interval resampling seeds, and the per-seed differences."""
    out = {}
    for (a, b), estimator in ((c, e) for c in CONTRASTS for e in args.estimators.split(",")):
        a, b, oracle = f"{a}-{estimator}", f"{b}-{estimator}", f"oracle-{estimator}"
        if a not in arms or b not in arms:
            continue
        mine, other = paired(runs, a, b)
        finals = [[c[-1][1] for c in side] for side in (other, mine)]
        boot = paired_bootstrap(*finals, n=4000)
        per_seed = [x - y for x, y in zip(finals[1], finals[0], strict=True)]
        row = {"seeds": len(mine), "final_error": {"difference": boot.diff, "ci95": [boot.low, boot.high]}}
        row["final_error"]["per_seed"] = per_seed
        if oracle in arms and (step := se.first_reached(paired(runs, oracle)[0], 0.25)) is not None:
            mine, other, ref = paired(runs, a, b, oracle)
            row["share_at_oracle_0.25"] = se.share_difference(mine, other, ref, step)
        out[f"{a} - {b}"] = row
    return out


def print_report(table: dict, shares: dict, drifts: dict, controls: dict) -> None:
    curves.print_arms(table, FRACTIONS, label=lambda arm, a: f"scoring {100 * a['score_share']:4.1f}% of a step")
    for arm, a in table.items():
        lo, hi = a["final_error_ci95"]
        print(f"{arm:20s} final error {a['final_error_mean']:.4f} [{lo:.4f}, {hi:.4f}], {_spread(a['final_error'])}")
    for arm, s in shares.items():
        at, last = s["at_oracle_0.25"], s["at_last_step"]
        head = "oracle never reached 0.25x" if at["step"] is None else _share(at)
        print(f"{arm:20s} share of {s['oracle']}'s gain: {head}; at the last step {_share(last)}")
    for pair, c in controls.items():
        f = c["final_error"]
        line = (
            f"final error {f['difference']:+.4f} [{f['ci95'][0]:+.4f}, {f['ci95'][1]:+.4f}] ({_spread(f['per_seed'])})"
        )
        if d := c.get("share_at_oracle_0.25"):
            line += f"; share at step {d['step']} {100 * d['difference']:+.1f} [{100 * d['ci95'][0]:+.1f}, "
            line += f"{100 * d['ci95'][1]:+.1f}] points"
        print(f"{pair:40s} ({c['seeds']} seeds, paired) {line}")
    for arm, by_step in drifts.items():
        f1 = ", ".join(f"step {k}: {v['span_f1']:.3f} of {v['reference_spans']}" for k, v in by_step.items())
        print(f"{arm:20s} tagger vs oracle, poor-span F1 (oracle spans): {f1}")


def _share(s: dict) -> str:
    per_seed = [100 * g / r if r else float("nan") for g, r in zip(s["gains"], s["reference_gains"], strict=True)]
    head = f"{100 * s['share']:.0f}% [{100 * s['ci95'][0]:.0f}, {100 * s['ci95'][1]:.0f}] at step {s['step']}"
    return f"{head} (per seed {_spread(per_seed, '.0f')})"


def _spread(values: list[float], fmt: str = ".4f") -> str:
    """Median and range of all runs."""
    return f"median {statistics.median(values):{fmt}}, range {min(values):{fmt}}..{max(values):{fmt}}"
