"""Sample efficiency of span vs scalar vs dense rewards (the paper's central claim, in miniature).

Demo summarization task (8 facts per post), oracle reference critic as the reward source, one warm-started policy,
the same hyperparameters for every arm; only where the task reward is placed differs (t2g_core.rl.rewards):
span = the critic's +-1 span labels on their tokens, scalar = their sum on the last token, dense = that sum / T on
every token. Each (arm, seed) runs as its own 1-thread process, ``--workers`` at a time.

Reported per arm (mean +- sd over seeds): steps until the 5-step moving average of the on-policy task error
(1 - correct facts / 8) falls to half the warm-start error, the final held-out error, and the span/scalar step ratio.
Writes benchmarks/results/ppo_sample_efficiency.json and ppo_learning_curves.png.

    .venv/bin/python benchmarks/bench_ppo_sample_efficiency.py --seeds 3 --steps 60 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SMOKE = {
    "seeds": 1,
    "steps": 2,
    "batch_size": 4,
    "max_new_tokens": 8,
    "eval_every": 1,
    "n_eval": 4,
    "workers": 1,
    "lm_steps": 0,
    "sft_steps": 5,
    "arms": "span,scalar",
}
ARMS = ("span", "scalar", "dense")


def _models_cfg(args):
    from t2g_core.config.models import ModelsConfig, TinyModelConfig

    tiny = TinyModelConfig(
        warm_start_steps=args.lm_steps,
        policy_sft_steps=args.sft_steps,
        policy_sft_batch_size=32,
        policy_sft_lr=3e-3,
        warm_start_batch_size=32,
    )
    if getattr(args, "smoke", False):  # a policy that only has to exist
        tiny = tiny.model_copy(
            update={
                "vocab_size": 256,
                "hidden_size": 32,
                "intermediate_size": 64,
                "policy_noise_steps": 2,
                "policy_sft_examples": 64,
                "policy_sft_batch_size": 8,
            }
        )
    return ModelsConfig(tiny=tiny)


def build_policy(args) -> Path:
    """The warm-started demo policy (built once, reused by every arm)."""
    import torch

    from t2g_core.demo import make_demo_feedback
    from t2g_core.models.tiny import ensure_demo_models

    torch.set_num_threads(args.build_threads)
    feedback = make_demo_feedback("summarization", 256, seed=0)
    t0 = time.time()
    models = ensure_demo_models(Path(args.workdir) / "models", _models_cfg(args), feedback, progress=False, log=print)
    print(f"warm-started policy: {models.policy} ({time.time() - t0:.0f} s)", flush=True)
    if args.extra_sft_steps == 0:
        return models.policy
    return continue_sft(models.policy, args)


def continue_sft(policy: Path, args) -> Path:
    """More supervised steps on fresh (prompt -> noisy summary) pairs, starting from ``policy`` (built once)."""
    from transformers import AutoTokenizer

    from t2g_core.demo.summarization import warm_start_pairs
    from t2g_core.models.tiny import warm_start
    from t2g_core.policy_prompts import render_policy_prompt

    out = policy.parent / f"policy-sft{args.extra_sft_steps}"
    if (out / "config.json").exists():
        return out
    tiny = _models_cfg(args).tiny
    tok = AutoTokenizer.from_pretrained(policy)
    pairs = [
        (render_policy_prompt(tok, "summarization", p), r)
        for p, r in warm_start_pairs(4096, seed=7, p_halluc=tiny.p_halluc)
    ]
    tmp = policy.parent / f".{out.name}.tmp"
    res = warm_start(
        policy, pairs, tiny, steps=args.extra_sft_steps, lr=2e-3, batch_size=32, out_dir=tmp, progress=False
    )
    tmp.rename(out)
    print(
        f"continued SFT: {args.extra_sft_steps} steps in {res.seconds:.0f} s, loss {res.losses[0]:.3f} -> "
        f"{res.losses[-1]:.3f}",
        flush=True,
    )
    return out


def ppo_config(args, mode: str, seed: int):
    from t2g_core.config.ppo import PPOConfig

    return PPOConfig(
        reward_mode=mode,
        reward_source="oracle",
        steps=args.steps,
        batch_size=args.batch_size,
        minibatches=args.minibatches,
        ppo_epochs=4,
        learning_rate=args.lr,
        value_learning_rate=3e-4,
        kl_coef=0.05,
        gamma=1.0,
        lam=0.95,
        value_model="separate",
        max_new_tokens=args.max_new_tokens,
        eval_every=args.eval_every,
        log_every=args.steps,
        save_every=args.steps,
        heatmap_samples=4,
        seed=seed,
        max_approx_kl=args.max_approx_kl,
        lr_schedule=args.lr_schedule,
    )


def run_arm(args) -> None:
    """One (mode, seed) run in this process (called through a subprocess by :func:`main`)."""
    import torch

    torch.set_num_threads(1)
    from t2g_core.demo import make_demo_feedback
    from t2g_core.ppo import train
    from t2g_core.ppo.sources import oracle_source, summary_metrics

    prompts = make_demo_feedback("summarization", 32 if args.smoke else 512, seed=1)
    eval_df = make_demo_feedback("summarization", args.n_eval, seed=2)
    out = Path(args.workdir) / "runs" / f"{args.arm}-seed{args.seed}"
    t0 = time.time()
    train(
        ppo_config(args, args.arm, args.seed),
        args.policy,
        prompts,
        out,
        reward_source=oracle_source("summarization"),
        eval_df=eval_df,
        task_metric=summary_metrics,
    )
    print(json.dumps({"arm": args.arm, "seed": args.seed, "seconds": time.time() - t0, "run_dir": str(out)}))


def _launch(args, mode: str, seed: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--run-arm",
        mode,
        "--seed",
        str(seed),
        "--policy",
        str(args.policy),
    ] + _shared_flags(args)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} seed {seed} failed:\n{proc.stderr[-3000:]}")
    print(f"  {mode:6s} seed {seed}: {time.time() - t0:.0f} s", flush=True)
    history = json.loads((Path(args.workdir) / "runs" / f"{mode}-seed{seed}" / "history.json").read_text())
    return {"arm": mode, "seed": seed, "history": history, "seconds": time.time() - t0}


def _shared_flags(args) -> list[str]:
    keys = (
        "steps",
        "batch_size",
        "minibatches",
        "lr",
        "max_new_tokens",
        "eval_every",
        "n_eval",
        "workdir",
        "lm_steps",
        "sft_steps",
        "extra_sft_steps",
        "metric",
        "max_approx_kl",
        "lr_schedule",
    )
    smoke = ["--smoke"] if args.smoke else []
    return smoke + [x for k in keys for x in (f"--{k.replace('_', '-')}", str(getattr(args, k)))]


def steps_to(history: list[dict], target: float, metric: str = "error", window: int = 5) -> int | None:
    """First step at which the moving average of the on-policy task metric is <= target (None if never)."""
    errs = [h[f"task/{metric}"] for h in history]
    for i in range(len(errs)):
        lo = max(0, i - window + 1)
        if sum(errs[lo : i + 1]) / (i + 1 - lo) <= target:
            return history[i]["step"]
    return None


def _mean_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def summarise(runs: list[dict], args) -> dict:
    # warm-start error: the step-0 rollouts (sampled from the warm start, before any update), over every run
    metric = args.metric
    err0 = statistics.fmean(r["history"][0][f"task/{metric}"] for r in runs)
    arms = {}
    for mode in ARMS:
        mine = [r for r in runs if r["arm"] == mode]
        if not mine:
            continue
        reached = [steps_to(r["history"], 0.5 * err0, metric) for r in mine]
        finals = [r["history"][-1][f"eval/task_{metric}"] for r in mine]
        steps = [
            s if s is not None else args.steps for s in reached
        ]  # not reached: counted as the run length (a lower bound)
        arms[mode] = {
            "steps_to_half": reached,
            "steps_to_half_mean": _mean_sd(steps)[0],
            "steps_to_half_sd": _mean_sd(steps)[1],
            "n_reached": sum(s is not None for s in reached),
            "final_eval_error": finals,
            "final_eval_error_mean": _mean_sd(finals)[0],
            "final_eval_error_sd": _mean_sd(finals)[1],
            "seconds_per_run": statistics.fmean(r["seconds"] for r in mine),
        }
    ratio = {m: arms[m]["steps_to_half_mean"] / arms["scalar"]["steps_to_half_mean"] for m in arms if "scalar" in arms}
    return {
        "metric": metric,
        "warm_start_error": err0,
        "target_error": 0.5 * err0,
        "arms": arms,
        "steps_ratio_vs_scalar": ratio,
    }


def plot(runs: list[dict], summary: dict, path: Path, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"span": "tab:green", "scalar": "tab:blue", "dense": "tab:orange"}
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs:
        h = r["history"]
        ax[0].plot(
            [x["step"] for x in h],
            [x[f"task/{args.metric}"] for x in h],
            color=colours[r["arm"]],
            alpha=0.6,
            lw=1,
            label=r["arm"] if r["seed"] == 0 else None,
        )
        ev = [x for x in h if f"eval/task_{args.metric}" in x]
        ax[1].plot(
            [x["step"] for x in ev],
            [x[f"eval/task_{args.metric}"] for x in ev],
            color=colours[r["arm"]],
            marker="o",
            ms=3,
            alpha=0.7,
            label=r["arm"] if r["seed"] == 0 else None,
        )
    for a, title in zip(ax, (f"on-policy batch task {args.metric}", f"held-out task {args.metric}"), strict=True):
        a.axhline(summary["target_error"], color="grey", ls="--", lw=1)
        a.set_xlabel("PPO step")
        a.set_title(title)
        a.legend()
    ax[0].set_ylabel(args.metric)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--minibatches", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-new-tokens", type=int, default=48)
    from t2g_core.config.ppo import PPOConfig

    p.add_argument(
        "--max-approx-kl",
        type=float,
        default=PPOConfig.model_fields["max_approx_kl"].default,
        help="Stop a PPO epoch early above this approximate KL (default: PPOConfig's).",
    )
    p.add_argument(
        "--lr-schedule", default=PPOConfig.model_fields["lr_schedule"].default, choices=("constant", "linear")
    )
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--n-eval", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--metric",
        default="error",
        choices=("error", "imprecision", "invented_rate"),
        help="Task metric whose halving is timed (error = 1 - correct/8).",
    )
    p.add_argument("--workdir", default=str(RESULTS / "work-ppo"))
    p.add_argument("--lm-steps", type=int, default=0, help="LM warm-start steps of the demo base (0: SFT only).")
    p.add_argument("--sft-steps", type=int, default=300, help="Supervised steps of the demo policy.")
    p.add_argument(
        "--extra-sft-steps", type=int, default=0, help="Continue the policy's SFT for this many steps (0: off)."
    )
    p.add_argument("--build-threads", type=int, default=1)
    p.add_argument("--build-only", action="store_true")
    p.add_argument("--smoke", action="store_true", help="A tiny run that only proves the script works (the suite).")
    p.add_argument("--run-arm", dest="arm", default=None, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument(
        "--policy", default=None, help="Use this warm-started policy folder (e.g. the demo's) instead of building one."
    )
    args = p.parse_args()
    if args.smoke:
        args.__dict__.update(SMOKE, workdir=str(RESULTS / "smoke" / "work-ppo"))
    if args.arm:
        return run_arm(args)
    args.policy = Path(args.policy) if args.policy else build_policy(args)
    if args.build_only:
        return None
    jobs = [(m, s) for s in range(args.seeds) for m in args.arms.split(",")]
    t0 = time.time()
    with ThreadPoolExecutor(args.workers) as pool:
        runs = list(pool.map(lambda job: _launch(args, *job), jobs))
    summary = summarise(runs, args)
    summary |= {
        "config": {k: v for k, v in vars(args).items() if k not in ("policy",)},
        "policy": str(args.policy),
        "wall_seconds": time.time() - t0,
    }
    out_dir = RESULTS / "smoke" if args.smoke else RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / "ppo_learning_curves.png"
    plot(runs, summary, png, args)
    (out_dir / "ppo_sample_efficiency.json").write_text(
        json.dumps(
            {
                **summary,
                "curves": {
                    f"{r['arm']}-seed{r['seed']}": [
                        {
                            k: v
                            for k, v in h.items()
                            if k == "step" or k.startswith(("task/", "eval/task_", "kl/mean", "response/"))
                        }
                        for h in r["history"]
                    ]
                    for r in runs
                },
            },
            indent=1,
        )
    )
    print(json.dumps({k: summary[k] for k in ("warm_start_error", "target_error", "steps_ratio_vs_scalar")}, indent=1))
    for mode, a in summary["arms"].items():
        print(
            f"{mode:6s} steps to half: {a['steps_to_half']} mean {a['steps_to_half_mean']:.1f} +- "
            f"{a['steps_to_half_sd']:.1f}"
            f" | final eval error {a['final_eval_error_mean']:.3f} +- {a['final_eval_error_sd']:.3f}"
        )
    print(f"learning curves: {png}")


if __name__ == "__main__":
    main()
