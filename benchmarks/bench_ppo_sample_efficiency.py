"""Sample efficiency of reward placements and credit-assignment estimators, each arm tuned with the same budget.

The paper's central claim, measured fairly: every arm gets the same tuning grid (learning rate x GAE lambda
x KL early stop), the best configuration of each arm is then run on >= 5 seeds x >= 2 independently built warm
starts, and steps are counted until the **held-out** task error (periodic evaluation on prompts never trained on)
reaches 0.5x and 0.25x the warm-start error. The denominator is the best-tuned arm that only has the scalar's
information (scalar, uniform, or scalar with a leave-one-out group baseline). The reward source is named
explicitly: the oracle critic of the task (reference critic for summarization, sandboxed code critic for code).

Arms (``ARMS``; PPOConfig overrides): scalar, uniform (the scalar spread over every token), scalar_rloo; the paper's
dense ablation (word-level labels); span with GAE, span_local, span_bootstrap (critic warm-up), span_rloo, span_grpo.

Tasks:
- ``summarization``: the demo's 8-fact posts; error = 1 - correct facts / 8 on held-out posts.
- ``code``: HumanEval problems with short canonical solutions; the warm start learns them, then learns to write
  single-line mutants half of the time (the demo's mutation operators), so it fails tests PPO can fix. PPO trains on
  some problems; pass@1 is measured on the **other** problems (held out from RL, seen in supervised warm-up: a tiny
  model cannot write unseen HumanEval code), error = 1 - pass@1. The code critic localises faults by mutation.

Each (arm, config, warm start, seed) is a 1-thread subprocess, ``--workers`` at a time; finished runs are kept in
``--workdir`` and skipped when the benchmark is run again (so a sweep can be resumed). Phases: ``tune`` (the grid,
``--tune-seeds`` seeds, first warm start), ``final`` (the best configuration of each arm, ``--seeds`` x
``--warm-starts``), ``all`` (both). Writes ppo_sample_efficiency_<task>[_<tag>].json in the results folder
(``testbed.results_dir``: benchmarks/results/ unless ``$T2G_BENCH_RESULTS`` says otherwise) and
docs/figures/ppo_sample_efficiency_<task>.png (held-out curves, mean and 95% bootstrap band per arm; a tagged or smoke
run keeps its figure beside its JSON). The statistics (steps to a target, censoring, collapse, intervals) are
``t2g_core.evaluation.sample_efficiency``; the tasks are ``testbed.TASKS``.

    .venv/bin/python benchmarks/bench_ppo_sample_efficiency.py --task summarization --phase all --workers 2
    .venv/bin/python benchmarks/bench_ppo_sample_efficiency.py --smoke
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed import PPO_SMOKE_WORK, ROOT, TASKS, results_dir, run_job

from t2g_core.evaluation import sample_efficiency as se

FIGURES = ROOT / "docs" / "figures"

ARMS: dict[str, dict] = {
    "scalar": {"reward_mode": "scalar"},
    "uniform": {"reward_mode": "uniform"},
    "scalar_rloo": {"reward_mode": "scalar", "advantage": "rloo", "group_size": 4},
    "dense": {"reward_mode": "dense"},
    "span": {"reward_mode": "span"},
    "span_local": {"reward_mode": "span", "advantage": "span_local"},
    "span_bootstrap": {"reward_mode": "span", "advantage": "span_bootstrap", "critic_warmup_steps": 2},
    "span_rloo": {"reward_mode": "span", "advantage": "rloo", "group_size": 4},
    "span_grpo": {"reward_mode": "span", "advantage": "grpo", "group_size": 4},
}
DEFAULT_ARMS = ("scalar", "scalar_rloo", "dense", "span", "span_local", "span_bootstrap", "span_rloo")  # fits 2 cores
SCALAR_INFO = ("scalar", "uniform", "scalar_rloo")  # arms that only see the sequence score
SPAN_INFO = ("span", "span_local", "span_bootstrap", "span_rloo", "span_grpo")
FRACTIONS = (0.5, 0.25)
TASK_DEFAULTS = {  # code: what 2 shared cores allow (a run is ~4.5 min, mostly sandbox); flags still override
    "code": {
        "arms": "span,scalar",
        "lrs": "1e-3,3e-3",
        "lams": "0.95,1",
        "kl_stops": "0.03",
        "seeds": 3,
        "warm_starts": 1,
        "steps": 16,
        "eval_every": 4,
        "max_new_tokens": 40,
        "code_eval_copies": 2,
        "lm_steps": 0,
    }
}
SMOKE = {
    "steps": 2,
    "batch_size": 4,
    "max_new_tokens": 8,
    "eval_every": 1,
    "n_eval": 4,
    "workers": 1,
    "sft_steps": 5,
    "lm_steps": 0,
    "arms": "span,scalar",
    "lrs": "1e-3",
    "lams": "0.95",
    "kl_stops": "0.03",
    "tune_seeds": 1,
    "seeds": 1,
    "warm_starts": 1,
    "phase": "all",
}


# ----------------------------------------------------------------------------------------------------------------
# one run (a subprocess)
# ----------------------------------------------------------------------------------------------------------------


def ppo_config(args, arm: str, tuned: dict, seed: int):
    from t2g_core.config.ppo import PPOConfig

    fields = {
        "reward_source": "oracle",
        "steps": args.steps,
        "batch_size": args.batch_size,
        "minibatches": args.minibatches,
        "ppo_epochs": 4,
        "value_learning_rate": 3e-4,
        "kl_coef": 0.05,
        "gamma": 1.0,
        "value_model": "separate",
        "max_new_tokens": args.max_new_tokens,
        "eval_every": args.eval_every,
        "log_every": args.steps,
        "save_every": args.steps,
        "heatmap_samples": 0,
        "omission_penalty": args.omission_penalty,
        "seed": seed,
    }
    return PPOConfig(**(fields | ARMS[arm] | tuned))


def run_one(args) -> None:
    """One (arm, config, warm start, seed) run in this process; writes run.json into its folder."""
    import torch

    torch.set_num_threads(1)
    spec = json.loads(args.spec)
    out = Path(spec["out"])
    run = TASKS[spec["task"]](args).fit(ppo_config(args, spec["arm"], spec["tuned"], spec["seed"]), spec["policy"], out)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    keep = ("task/", "eval/", "kl/", "response/", "ppo/", "value/", "grad/", "policy/", "reward/", "loss/", "lr/")
    history = [{k: v for k, v in h.items() if k == "step" or k.startswith(keep)} for h in run["history"]]
    (out / "run.json").write_text(json.dumps({**spec, **run, "history": history}))


def _same_as_tighter_stop(spec: dict) -> dict | None:
    """A finished run of the same configuration with a lower KL stop that never stopped early: it is this run too
    (every measured KL stayed under the lower bound, so under this one the trajectory is the same, bit for bit)."""
    cfg_dir = Path(spec["out"]).parents[2]  # runs/<arm>/<name>/<key>/<ws-seed>
    for sibling in sorted(cfg_dir.glob(f"*/{Path(spec['out']).parent.name}/{Path(spec['out']).name}/run.json")):
        run = json.loads(sibling.read_text())
        tuned, mine = run["tuned"], spec["tuned"]
        same = all(tuned[k] == mine[k] for k in mine if k != "max_approx_kl")
        if same and tuned["max_approx_kl"] < mine["max_approx_kl"]:
            if not any(h.get("ppo/early_stopped") for h in run["history"]):
                return {**run, **spec, "same_as": str(sibling.parent)}
    return None


def _launch(args, spec: dict) -> dict:
    out = Path(spec["out"])
    done = out / "run.json"
    if done.exists():
        return json.loads(done.read_text())
    same = _same_as_tighter_stop(spec)
    if same is not None:
        out.mkdir(parents=True, exist_ok=True)
        done.write_text(json.dumps(same))
        return same
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--run-one", json.dumps(spec)] + _shared_flags(args)
    run_job(cmd, f"{spec['arm']:15s} {spec['name']:28s} ws{spec['warm_start']} seed {spec['seed']}")
    return json.loads(done.read_text())


SHARED = (
    "task",
    "steps",
    "batch_size",
    "minibatches",
    "max_new_tokens",
    "eval_every",
    "n_eval",
    "workdir",
    "lm_steps",
    "sft_steps",
    "omission_penalty",
    "code_noise_steps",
    "code_eval_copies",
)


def _shared_flags(args) -> list[str]:
    smoke = ["--smoke"] if args.smoke else []
    return smoke + [x for k in SHARED for x in (f"--{k.replace('_', '-')}", str(getattr(args, k)))]


# ----------------------------------------------------------------------------------------------------------------
# the sweep
# ----------------------------------------------------------------------------------------------------------------


def grid(arm: str, args) -> list[dict]:
    """The tuning grid of one arm: learning rate x lambda (GAE-based arms only) x KL early stop."""
    lrs = [float(x) for x in args.lrs.split(",")]
    lams = [float(x) for x in args.lams.split(",")] if ARMS[arm].get("advantage") not in ("rloo", "grpo") else [1.0]
    stops = [float(x) for x in args.kl_stops.split(",")]
    return [
        {"learning_rate": lr, "lam": lam, "max_approx_kl": kl} for lr, lam, kl in itertools.product(lrs, lams, stops)
    ]


def config_name(tuned: dict) -> str:
    return f"lr{tuned['learning_rate']:g}_lam{tuned['lam']:g}_kl{tuned['max_approx_kl']:g}"


def spec(args, arm: str, tuned: dict, warm_start: int, policy: Path, seed: int) -> dict:
    """One run; its folder is keyed by everything that shapes it (settings, policy, code of the arm), so a finished
    run is reused only by an identical one."""
    import hashlib

    name = config_name(tuned)
    key = hashlib.sha256(json.dumps([_shared_flags(args), str(policy), ARMS[arm]]).encode()).hexdigest()[:10]
    out = Path(args.workdir) / "runs" / arm / name / key / f"ws{warm_start}-seed{seed}"
    return {
        "task": args.task,
        "arm": arm,
        "name": name,
        "tuned": tuned,
        "warm_start": warm_start,
        "policy": str(policy),
        "seed": seed,
        "out": str(out),
    }


def run_all(args, specs: list[dict]) -> list[dict]:
    with ThreadPoolExecutor(args.workers) as pool:
        return list(pool.map(lambda s: _launch(args, s), specs))


def curve(run: dict) -> list[tuple[int, float]]:
    """(PPO steps trained, held-out error): the warm start at 0, then after each evaluated step."""
    pts = [(0, run["warm_eval"]["eval/task_error"])]
    return pts + [(h["step"] + 1, h["eval/task_error"]) for h in run["history"] if "eval/task_error" in h]


def summarise_arm(runs: list[dict], steps: int) -> dict:
    lengths = [r["history"][-1].get("response/length") for r in runs]
    return se.summarise([curve(r) for r in runs], steps, FRACTIONS) | {
        "final_length_mean": statistics.fmean(x for x in lengths if x is not None),
        "seconds_per_run": statistics.fmean(r["seconds"] for r in runs),
    }


def tune(args, arms: list[str], policy: Path) -> dict[str, dict]:
    """Every grid configuration of every arm on the first warm start; the best per arm (fewest steps to 0.25x, then
    the lowest area under the held-out error curve). The tightest KL stop runs first: a looser stop's run is the same
    run when the tighter one never stopped (see :func:`_same_as_tighter_stop`)."""
    specs = [spec(args, a, t, 0, policy, s) for a in arms for t in grid(a, args) for s in range(args.tune_seeds)]
    specs.sort(key=lambda sp: sp["tuned"]["max_approx_kl"])  # stable: arms and configs keep their order
    print(f"tuning: {len(specs)} runs", flush=True)
    runs = run_all(args, specs)
    table: dict[str, dict] = {}
    for arm in arms:
        configs = {}
        for tuned in grid(arm, args):
            mine = [r for r in runs if r["arm"] == arm and r["name"] == config_name(tuned)]
            configs[config_name(tuned)] = {"tuned": tuned, **summarise_arm(mine, args.steps)}
        best = min(configs.values(), key=lambda c: se.rank_key(c, 0.25))
        table[arm] = {"best": best["tuned"], "configs": configs}
    return table


def final(args, arms: list[str], policies: list[Path], best: dict[str, dict]) -> tuple[dict, list[dict]]:
    specs = [
        spec(args, a, best[a], w, policies[w], s) for a in arms for w in range(len(policies)) for s in range(args.seeds)
    ]
    print(f"final comparison: {len(specs)} runs", flush=True)
    runs = run_all(args, specs)
    table = {a: {"tuned": best[a], **summarise_arm([r for r in runs if r["arm"] == a], args.steps)} for a in arms}
    return table, runs


# ----------------------------------------------------------------------------------------------------------------
# figure and report
# ----------------------------------------------------------------------------------------------------------------

COLOURS = dict(zip(ARMS, ("blue", "cyan", "purple", "orange", "green", "olive", "red", "brown", "pink"), strict=True))


def plot(runs: list[dict], table: dict, path: Path, task) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for arm in table:
        steps, mean, lo, hi = se.curve_band([curve(r) for r in runs if r["arm"] == arm])
        ax.plot(steps, mean, color=f"tab:{COLOURS[arm]}", label=f"{arm} ({table[arm]['n_runs']} runs)", lw=1.6)
        ax.fill_between(steps, lo, hi, color=f"tab:{COLOURS[arm]}", alpha=0.15)
    err0 = statistics.fmean(r["warm_eval"]["eval/task_error"] for r in runs)
    for f in FRACTIONS:
        ax.axhline(f * err0, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("PPO steps trained")
    ax.set_ylabel(f"held-out error ({task.error_label})")
    ax.set_title(
        f"{task.name}: each arm at its best-tuned setting, mean and 95% bootstrap band\n(dashed: 0.5x and 0.25x the "
        "warm-start error)",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def print_table(table: dict, comparison: dict, steps: int) -> None:
    for arm, a in table.items():
        parts = [f"{arm:15s} {config_name(a['tuned']):26s}"]
        for f in FRACTIONS:
            lo, hi = a[f"steps_to_{f}_ci95"]
            parts.append(
                f"to {f}x: {a[f'steps_to_{f}_mean']:5.1f} [{lo:4.1f}, {hi:4.1f}] ({a[f'reached_{f}']} reached)"
            )
        lo, hi = a["final_error_ci95"]
        parts.append(f"final {a['final_error_mean']:.3f} [{lo:.3f}, {hi:.3f}] collapsed {a['collapsed']}/{a['n_runs']}")
        print(" | ".join(parts))
    for f, row in comparison.items():
        r = row["ratios"][row["best_span"]]
        print(
            f"steps to {f}x: best span arm {row['best_span']} / best scalar arm {row['denominator']} = "
            f"{r['ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] (not reached counted as {steps + 1})"
        )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="summarization", choices=tuple(TASKS))
    p.add_argument("--phase", default="all", choices=("tune", "final", "all"))
    p.add_argument(
        "--arms",
        default=",".join(DEFAULT_ARMS),
        help=f"Comma-separated, from: {', '.join(ARMS)} (default: all but "
        "uniform, the scalar spread, and span_grpo, which differs from span_rloo only by the scale of its baseline).",
    )
    p.add_argument("--lrs", default="3e-4,1e-3,3e-3", help="Tuning grid: policy learning rates.")
    p.add_argument("--lams", default="0.95,1", help="Tuning grid: GAE lambda (not used by rloo / grpo).")
    p.add_argument("--kl-stops", default="0.03,1", help="Tuning grid: max_approx_kl (1 = practically off).")
    p.add_argument("--tune-seeds", type=int, default=1)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--warm-starts", type=int, default=2, help="Independently built warm starts (model seeds 0..n-1).")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--minibatches", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--eval-every", type=int, default=2)
    p.add_argument("--n-eval", type=int, default=32, help="Held-out prompts per evaluation (summarization).")
    p.add_argument("--omission-penalty", type=float, default=1.0)
    p.add_argument("--lm-steps", type=int, default=300, help="Language-model steps of the warm start's base.")
    p.add_argument("--sft-steps", type=int, default=600, help="Supervised steps of the warm start.")
    p.add_argument("--build-only", type=int, default=None, metavar="SEED", help="Build this warm start and exit.")
    p.add_argument("--code-noise-steps", type=int, default=150, help="Code: SFT steps on half-mutant targets.")
    p.add_argument("--code-eval-copies", type=int, default=4, help="Code: samples per held-out problem.")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--workdir", default=None, help="Default: benchmarks/results/work-ppo-<task>.")
    p.add_argument("--tag", default="", help="Suffix of the result and figure names (e.g. an ablation).")
    p.add_argument("--smoke", action="store_true", help="A tiny run that only proves the script works (the suite).")
    p.add_argument("--run-one", dest="spec", default=None, help=argparse.SUPPRESS)
    task, _ = p.parse_known_args()
    p.set_defaults(**TASK_DEFAULTS.get(task.task, {}))
    args = p.parse_args()
    if args.smoke:
        args.__dict__.update(SMOKE, workdir=str(PPO_SMOKE_WORK))
        if not args.spec:  # every smoke run trains again (finished runs are otherwise reused)
            shutil.rmtree(Path(args.workdir) / "runs", ignore_errors=True)
    args.workdir = args.workdir or str(results_dir() / f"work-ppo-{args.task}")
    return args


def main() -> None:
    args = parse_args()
    if args.spec:
        return run_one(args)
    task = TASKS[args.task](args)
    if args.build_only is not None:
        print(f"warm start {args.build_only}: {task.build_policy(args.build_only)}")
        return None
    arms = args.arms.split(",")
    policies = [task.build_policy(seed) for seed in range(args.warm_starts)]
    t0 = time.time()
    out_dir = results_dir(args.smoke)
    name = f"ppo_sample_efficiency_{args.task}{'_' + args.tag if args.tag else ''}"
    tune_file = out_dir / f"{name}_tuning.json"
    if args.phase in ("tune", "all"):
        tuning = tune(args, arms, policies[0])
        out_dir.mkdir(parents=True, exist_ok=True)
        tune_file.write_text(json.dumps(tuning, indent=1))
        print(f"tuning: {tune_file}")
    if args.phase == "tune":
        return None
    if not tune_file.exists():
        raise SystemExit(f"{tune_file}: no tuning results; run --phase tune first")
    tuning = json.loads(tune_file.read_text())
    table, runs = final(args, arms, policies, {a: tuning[a]["best"] for a in arms})
    comparison = se.compare(table, args.steps, FRACTIONS, SCALAR_INFO, SPAN_INFO, fallback_arms=("dense",))
    figure = (out_dir if args.smoke or args.tag else FIGURES) / f"{name}.png"  # ablations stay with the results
    plot(runs, table, figure, task)
    result = {
        "task": args.task,
        "reward_source": "oracle",
        "config": {k: v for k, v in vars(args).items() if k != "spec"},
        "policies": [str(x) for x in policies],
        "arms": table,
        "comparison": comparison,
        "tuning": {
            a: {n: {k: c[k] for k in c if k.endswith(("_mean", "collapsed"))} for n, c in t["configs"].items()}
            for a, t in tuning.items()
            if a in arms
        },
        "wall_seconds_final": time.time() - t0,
        "curves": {f"{r['arm']}-ws{r['warm_start']}-seed{r['seed']}": curve(r) for r in runs},
    }
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=1))
    print_table(table, comparison, args.steps)
    print(f"results: {out_dir / (name + '.json')}\nfigure: {figure}")


if __name__ == "__main__":
    main()
