"""Sample efficiency of reward placements and credit-assignment estimators, each arm tuned with the same budget.

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from testbed import (
    PPO_SMOKE_WORK,
    ROOT,
    TASKS,
    curves,
    key_of,
    oracle_ppo_config,
    parser,
    results_dir,
    run_in_processes,
    run_spec_file,
    shared_flags,
    write_results,
)

from t2g_core.evaluation import sample_efficiency as se

FIGURES = ROOT / "docs" / "figures"

ARMS: dict[str, dict] = {
    "scalar": {"reward_mode": "scalar"},
    "uniform": {"reward_mode": "uniform"},
    "scalar_rloo": {"reward_mode": "scalar", "advantage_estimator": "rloo", "group_size": 4},
    "dense": {"reward_mode": "dense"},
    "span": {"reward_mode": "span"},
    "span_local": {"reward_mode": "span", "advantage_estimator": "span_local"},
    "span_bootstrap": {"reward_mode": "span", "advantage_estimator": "span_bootstrap", "critic_warmup_steps": 2},
    "span_rloo": {"reward_mode": "span", "advantage_estimator": "rloo", "group_size": 4},
    "span_grpo": {"reward_mode": "span", "advantage_estimator": "grpo", "group_size": 4},
}
DEFAULT_ARMS = ("scalar", "scalar_rloo", "dense", "span", "span_local", "span_bootstrap", "span_rloo")  # fits 2 cores
SCALAR_INFO = ("scalar", "uniform", "scalar_rloo")  # arms that only see the sequence score
SPAN_INFO = ("span", "span_local", "span_bootstrap", "span_rloo", "span_grpo")
FRACTIONS = (0.5, 0.25)
HEADLINE_PREFERENCE = (0.25, 0.5)  # the deeper target first: it measures progress that lasts
EVAL_SEED0 = 100  # evaluation seeds are EVAL_SEED0, EVAL_SEED0 + 1, ...; tuning seeds 0, 1, ...
CODE = dict(arms="span,scalar", lrs="1e-3,3e-3", lams="0.95,1", kl_stops="0.03", seeds=3, warm_starts=2)
CODE |= dict(tune_warm_starts=1, steps=16, eval_every=4, max_new_tokens=40, code_eval_copies=2, lm_steps=0)
TASK_DEFAULTS = {"code": CODE}  # code: what 2 shared cores allow (a run is ~4.5 min, mostly sandbox); flags override
SMOKE = dict(steps=2, batch_size=4, max_new_tokens=8, eval_every=1, n_eval=4, workers=1, runs_per_process=100)
SMOKE |= dict(sft_steps=5, lm_steps=0, arms="span_local:head,scalar:head", lrs="1e-3", lams="0.95", kl_stops="0.03")
SMOKE |= dict(tune_seeds=1, seeds=1, warm_starts=2, tune_warm_starts=1, phase="all")


def base_arm(arm: str) -> str:
    return arm.partition(":")[0]


def arm_settings(arm: str) -> dict:
    """PPOConfig overrides of an arm spec ``NAME`` or ``NAME:VALUE_MODEL``."""
    name, _, value_model = arm.partition(":")
    if name not in ARMS:
        raise SystemExit(f"unknown arm {name!r} in {arm!r}; expected one of {', '.join(ARMS)}")
    return ARMS[name] | ({"value_model": value_model} if value_model else {})


def ws_name(index: int) -> str:
    return chr(ord("A") + index)


# ----------------------------------------------------------------------------------------------------------------
# runs (each in a subprocess)
# ----------------------------------------------------------------------------------------------------------------


def ppo_config(args, arm: str, tuned: dict, seed: int):
    fields = dict(minibatches=args.minibatches, value_learning_rate=3e-4, omission_penalty=args.omission_penalty)
    return oracle_ppo_config(args, seed, fields | arm_settings(arm) | tuned)


def run_one(args, spec: dict, out: Path) -> dict:
    keep = ("task/", "eval/", "kl/", "response/", "ppo/", "value/", "grad/", "policy/", "reward/", "loss/", "lr/")
    cfg = ppo_config(args, spec["arm"], spec["tuned"], spec["seed"])
    eval_at = se.eval_schedule(args.steps, args.eval_every, args.dense_evals)
    run = TASKS[spec["task"]](args).fit(cfg, spec["policy"], out, eval_at, keep_at={0, args.steps})
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    history = [{k: v for k, v in h.items() if k == "step" or k.startswith(keep)} for h in run["history"]]
    return {**spec, **run, "history": history, "value_model": cfg.value_model}


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


SHARED = ("task", "steps", "batch_size", "minibatches", "max_new_tokens", "eval_every", "dense_evals", "n_eval")
SHARED += ("workdir", "lm_steps", "sft_steps", "omission_penalty", "code_noise_steps", "code_eval_copies")


def run_all(args, specs: list[dict]) -> list[dict]:
    """Every run: a finished one (or its twin at a tighter KL stop) is reused, the rest run in subprocesses."""
    for sp in specs:
        done = Path(sp["out"]) / "run.json"
        if not done.exists() and (same := _same_as_tighter_stop(sp)) is not None:
            done.parent.mkdir(parents=True, exist_ok=True)
            done.write_text(json.dumps(same))
    cmd = [sys.executable, __file__, *shared_flags(args, SHARED)]
    return run_in_processes(cmd, specs, args.workdir, args.workers, args.runs_per_process)


# ----------------------------------------------------------------------------------------------------------------
# the sweep
# ----------------------------------------------------------------------------------------------------------------


def grid(arm: str, args) -> list[dict]:
    """The tuning grid of one arm: learning rate x lambda (GAE-based arms only) x KL early stop."""
    lrs = [float(x) for x in args.lrs.split(",")]
    critic_free = arm_settings(arm).get("advantage_estimator") in ("rloo", "grpo")
    lams = [1.0] if critic_free else [float(x) for x in args.lams.split(",")]
    stops = [float(x) for x in args.kl_stops.split(",")]
    return [
        {"learning_rate": lr, "lam": lam, "max_approx_kl": kl} for lr, lam, kl in itertools.product(lrs, lams, stops)
    ]


def config_name(tuned: dict) -> str:
    return f"lr{tuned['learning_rate']:g}_lam{tuned['lam']:g}_kl{tuned['max_approx_kl']:g}"


def spec(args, arm: str, tuned: dict, warm_start: int, policy: Path, seed: int) -> dict:
    """One run; its folder is keyed by everything that shapes it (settings, policy, the arm's overrides), so a
    finished run is reused only by an identical one."""
    name = config_name(tuned)
    key = key_of([shared_flags(args, SHARED), str(policy), arm_settings(arm)])
    out = Path(args.workdir) / "runs" / arm.replace(":", "@") / name / key / f"ws{warm_start}-seed{seed}"
    run = dict(task=args.task, arm=arm, name=name, tuned=tuned, warm_start=warm_start, policy=str(policy), seed=seed)
    return run | {"out": str(out)}


def summarise_arm(runs: list[dict], args) -> dict:
    lengths = [r["history"][-1].get("response/length") for r in runs]
    return se.summarise([curves.curve(r) for r in runs], args.steps, FRACTIONS, args.plateau_evals) | {
        "final_length_mean": statistics.fmean(x for x in lengths if x is not None),
        "seconds_per_run": statistics.fmean(r["seconds"] for r in runs),
        "value_model": sorted({r.get("value_model", "?") for r in runs}),
        "explained_variance": curves.explained_variance(runs),
    }


def tune(args, arms: list[str], policies: list[Path]) -> dict[str, dict]:
    """Every grid configuration of every arm on the tuning warm starts x tuning seeds; the best per arm by its score
    averaged over them. The tightest KL stop runs first: a looser stop's run is the same run when the tighter one
    never stopped (see :func:`_same_as_tighter_stop`)."""
    specs = [
        spec(args, a, t, w, policies[w], s)
        for a in arms
        for t in grid(a, args)
        for w in range(args.tune_warm_starts)
        for s in range(args.tune_seeds)
    ]
    specs.sort(key=lambda sp: sp["tuned"]["max_approx_kl"])  # stable: arms and configs keep their order
    print(f"tuning: {len(specs)} runs", flush=True)
    runs = run_all(args, specs)
    table: dict[str, dict] = {}
    for arm in arms:
        configs = {}
        for tuned in grid(arm, args):
            mine = [r for r in runs if r["arm"] == arm and r["name"] == config_name(tuned)]
            configs[config_name(tuned)] = {"tuned": tuned, **summarise_arm(mine, args)}
        best = min(configs.values(), key=lambda c: se.rank_key(c, args.tune_target))
        table[arm] = {"best": best["tuned"], "configs": configs}
    return table


def final(args, arms: list[str], policies: list[Path], best: dict[str, dict]) -> tuple[dict, dict, list[dict]]:
    """Each arm's best configuration on every warm start x the evaluation seeds: the pooled table, the table of each
    warm start alone, and the runs."""
    seeds = range(EVAL_SEED0, EVAL_SEED0 + args.seeds)
    specs = [spec(args, a, best[a], w, policies[w], s) for a in arms for w in range(len(policies)) for s in seeds]
    print(f"final comparison: {len(specs)} runs", flush=True)
    runs = run_all(args, specs)
    table = {a: {"tuned": best[a], **summarise_arm([r for r in runs if r["arm"] == a], args)} for a in arms}
    by_ws = {
        ws_name(w): {a: summarise_arm([r for r in runs if r["arm"] == a and r["warm_start"] == w], args) for a in arms}
        for w in range(len(policies))
    }
    return table, by_ws, runs


def print_table(table: dict, comparison: dict, by_ws: dict, headline: str | None, critics: dict, steps: int) -> None:
    curves.print_arms(table, FRACTIONS, label=lambda arm, a: f"{config_name(a['tuned']):26s}")
    curves.print_comparison(comparison, by_ws)
    print(f"headline target: {headline + 'x' if headline else 'none is robust across warm starts'}")
    curves.print_critic_ratios(critics)
    print(f"(not reached counted as {steps + 1})")


def summary(result: dict, runs: list[dict]) -> dict:
    """The few KB the docs quote: settings, roles, per-arm figures, ratios (pooled and per warm start), the headline,
    the diagnosis, the tuning table and the mean curves."""
    target = f"steps_to_{result['config']['tune_target']}_mean"
    tuning = {
        arm: {n: {k: c[k] for k in (target, "auc_mean", "collapsed")} for n, c in configs.items()}
        for arm, configs in result["tuning"].items()
    }
    per_ws = (*(f"steps_to_{f}_mean" for f in FRACTIONS), "plateau_mean")
    by_ws = {ws: {arm: {k: a[k] for k in per_ws} for arm, a in t.items()} for ws, t in result["by_warm_start"].items()}
    arms = {
        arm: {k: a[k] for k in ("tuned", "value_model", "explained_variance", "seconds_per_run")}
        | curves.arm_row(a, FRACTIONS)
        for arm, a in result["arms"].items()
    }
    keep = ("task", "reward_source", "seeds", "eval_steps", "headline_target", "comparison", "warm_start_ratios")
    keep += ("critic_ratios",)
    return {k: result[k] for k in keep} | {
        "settings": {k: result["config"][k] for k in (*SHARED, "arms", "lrs", "lams", "kl_stops", "tune_target")},
        "warm_starts": {ws: {k: v for k, v in r.items() if k != "policy"} for ws, r in result["warm_starts"].items()},
        "arms": arms,
        "by_warm_start": by_ws,
        "diagnosis": {arm: curves.short_diagnosis(d) for arm, d in result["diagnosis"].items()},
        "tuning": tuning,
        "mean_curves": curves.mean_curves(runs, list(result["arms"])),
    }


def parse_args() -> argparse.Namespace:
    p = parser(__doc__, publish=True)
    p.add_argument("--task", default="summarization", choices=tuple(TASKS))
    p.add_argument("--phase", default="all", choices=("tune", "final", "all"))
    p.add_argument(
        "--arms",
        default=",".join(DEFAULT_ARMS),
        help=f"Comma-separated ARM or ARM:VALUE_MODEL (the critic, e.g. span_local:lora), ARM from: {', '.join(ARMS)}"
        " (default: all but uniform, the scalar spread, and span_grpo, which differs from span_rloo only by the "
        "scale of its baseline).",
    )
    p.add_argument("--lrs", default="3e-4,1e-3,3e-3", help="Tuning grid: policy learning rates.")
    p.add_argument("--lams", default="0.95,1", help="Tuning grid: GAE lambda (not used by rloo / grpo).")
    p.add_argument("--kl-stops", default="0.03,1", help="Tuning grid: max_approx_kl (1 = practically off).")
    p.add_argument("--tune-seeds", type=int, default=2, help="Seeds per tuning warm start (0, 1, ...).")
    p.add_argument("--tune-warm-starts", type=int, default=2, help="The first N warm starts are used in tuning.")
    p.add_argument("--tune-target", type=float, default=0.25, choices=FRACTIONS, help="Tuning ranks by this target.")
    p.add_argument("--seeds", type=int, default=5, help=f"Evaluation seeds per warm start ({EVAL_SEED0}, ...).")
    p.add_argument("--warm-starts", type=int, default=3, help="Independently built warm starts (model seeds 0..n-1).")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--minibatches", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--eval-every", type=int, default=2, help="Held-out evaluation every N steps after the dense part.")
    p.add_argument("--dense-evals", type=int, default=8, help="Held-out evaluation after each of the first N steps.")
    p.add_argument("--plateau-evals", type=int, default=3, help="A run's plateau: the mean of its last N evaluations.")
    p.add_argument("--n-eval", type=int, default=32, help="Held-out prompts per evaluation (summarization).")
    p.add_argument("--omission-penalty", type=float, default=1.0)
    p.add_argument("--lm-steps", type=int, default=300, help="Language-model steps of the warm start's base.")
    p.add_argument("--sft-steps", type=int, default=600, help="Supervised steps of the warm start.")
    p.add_argument("--build-only", type=int, default=None, metavar="SEED", help="Build this warm start and exit.")
    p.add_argument("--code-noise-steps", type=int, default=150, help="Code: SFT steps on half-mutant targets.")
    p.add_argument("--code-eval-copies", type=int, default=4, help="Code: samples per held-out problem.")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--runs-per-process", type=int, default=1, help="Runs one worker process does one after another.")
    p.add_argument("--workdir", default=None, help="Default: benchmarks/results/work-ppo-<task>.")
    p.add_argument("--tag", default="", help="Suffix of the result and figure names (e.g. an ablation).")
    p.add_argument("--run-specs", dest="specs", default=None, help=argparse.SUPPRESS)
    task, _ = p.parse_known_args()
    p.set_defaults(**TASK_DEFAULTS.get(task.task, {}))
    args = p.parse_args()
    if args.smoke:
        args.__dict__.update(SMOKE, workdir=str(PPO_SMOKE_WORK))
        if not args.specs:  # every smoke run trains again (finished runs are otherwise reused)
            shutil.rmtree(Path(args.workdir) / "runs", ignore_errors=True)
    if args.phase != "tune" and args.warm_starts <= args.tune_warm_starts:
        p.error(
            f"--warm-starts {args.warm_starts} must exceed --tune-warm-starts {args.tune_warm_starts}: the "
            "evaluation needs a warm start never used in tuning"
        )
    args.workdir = args.workdir or str(results_dir() / f"work-ppo-{args.task}")
    return args


def main() -> None:
    args = parse_args()
    if args.specs:
        return run_spec_file(args.specs, lambda spec, out: run_one(args, spec, out))
    task = TASKS[args.task](args)
    if args.build_only is not None:
        print(f"warm start {args.build_only}: {task.build_policy(args.build_only)}")
        return None
    arms = args.arms.split(",")
    for arm in arms:  # an unknown arm, or settings PPOConfig refuses (a critic it lacks), stop here, before any run
        try:
            ppo_config(args, arm, grid(arm, args)[0], 0)
        except ValueError as exc:
            raise SystemExit(f"arm {arm}: {exc}") from None
    n_ws = args.tune_warm_starts if args.phase == "tune" else args.warm_starts
    policies = [task.build_policy(seed) for seed in range(n_ws)]
    t0 = time.time()
    out_dir = results_dir(args.smoke)
    name = f"ppo_sample_efficiency_{args.task}{'_' + args.tag if args.tag else ''}"
    tune_file = out_dir / f"{name}_tuning.json"
    if args.phase in ("tune", "all"):
        tuning = tune(args, arms, policies)
        out_dir.mkdir(parents=True, exist_ok=True)
        tune_file.write_text(json.dumps(tuning, indent=1))
        print(f"tuning: {tune_file}")
    if args.phase == "tune":
        return None
    if not tune_file.exists():
        raise SystemExit(f"{tune_file}: no tuning results; run --phase tune first")
    tuning = json.loads(tune_file.read_text())
    missing = [a for a in arms if a not in tuning]
    if missing:
        raise SystemExit(f"{tune_file}: no tuning results for {', '.join(missing)}; run --phase tune with them")
    table, by_ws, runs = final(args, arms, policies, {a: tuning[a]["best"] for a in arms})
    scalar, span = [a for a in arms if base_arm(a) in SCALAR_INFO], [a for a in arms if base_arm(a) in SPAN_INFO]
    dense = [a for a in arms if base_arm(a) == "dense"]
    comparison = se.compare(table, args.steps, FRACTIONS, scalar, span, fallback_arms=dense)
    ws_ratios = se.warm_start_ratios(comparison, by_ws, args.steps)
    critics = curves.critic_ratios(table, arms, args.steps, FRACTIONS)
    headline = se.headline_target(ws_ratios, HEADLINE_PREFERENCE)
    diagnosis = curves.diagnose(task.diagnose, runs, arms, args.steps)
    figure = (out_dir if args.smoke or args.tag else FIGURES) / f"{name}.png"  # ablations stay with the results
    title = f"{task.name}: each arm at its best-tuned setting, mean and 95% bootstrap band\n(dashed: 0.5x and 0.25x"
    curves.plot_curves(
        runs, arms, figure, title + " the warm-start error)", f"held-out error ({task.error_label})", FRACTIONS
    )
    eval_seeds = list(range(EVAL_SEED0, EVAL_SEED0 + args.seeds))
    used_in = [["tuning", "evaluation"] if w < args.tune_warm_starts else ["evaluation"] for w in range(len(policies))]
    roles = {ws_name(w): {"model_seed": w, "policy": str(p), "used_in": used_in[w]} for w, p in enumerate(policies)}
    result = {
        "task": args.task,
        "reward_source": "oracle",
        "config": {k: v for k, v in vars(args).items() if k != "specs"},
        "warm_starts": roles,
        "seeds": {"tuning": list(range(args.tune_seeds)), "evaluation": eval_seeds},
        "eval_steps": se.eval_schedule(args.steps, args.eval_every, args.dense_evals),
        "arms": table,
        "by_warm_start": by_ws,
        "comparison": comparison,
        "warm_start_ratios": ws_ratios,
        "headline_target": headline,
        "critic_ratios": critics,
        "diagnosis": diagnosis,
        "tuning": {
            a: {n: {k: c[k] for k in c if k.endswith(("_mean", "collapsed"))} for n, c in t["configs"].items()}
            for a, t in tuning.items()
            if a in arms
        },
        "wall_seconds_final": time.time() - t0,
        "curves": {f"{r['arm']}|{ws_name(r['warm_start'])}|seed{r['seed']}": curves.curve(r) for r in runs},
    }
    path = write_results(name, result, summary(result, runs), smoke=args.smoke, publish=args.publish)
    print_table(table, comparison, ws_ratios, headline, critics, args.steps)
    curves.print_diagnosis(diagnosis)
    print(f"results: {out_dir / (name + '.json')}\nsummary: {path}\nfigure: {figure}")


if __name__ == "__main__":
    main()
