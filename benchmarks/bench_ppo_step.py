"""Cost of one PPO step, per phase, and the overhead of span rewards over the scalar path.

Runs a few steps of each reward mode from the same warm-started demo policy (1 thread) and reads the trainer's own
per-phase timers: rollout (sampling), score (the oracle critic), span_labels (prefix-decoded offsets of the sampled
ids + span alignment + token labels), forward (old/ref/value passes), rewards (placement + KL + GAE + whitening),
update (PPO epochs). The span-specific overhead is span_labels + rewards as a fraction of the step (target < 3%,
reward-model generation excluded: the oracle critic stands in for it).

    .venv/bin/python benchmarks/bench_ppo_step.py --policy DIR --steps 6
    .venv/bin/python benchmarks/bench_ppo_step.py --smoke          # a tiny run on a policy built in seconds
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from testbed import PPO_SMOKE_WORK, Summarization, results_dir

PHASES = ("rollout", "score", "span_labels", "forward", "rewards", "update")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--policy",
        default=None,
        help="Warm-started policy folder (e.g. the demo's, or bench_ppo_sample_efficiency --build-only); default: "
        "build one as bench_ppo_sample_efficiency does.",
    )
    p.add_argument("--smoke", action="store_true", help="A tiny run that only proves the script works (the suite).")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--workdir", default=str(results_dir() / "work-ppo-step"))
    args = p.parse_args()

    import torch

    torch.set_num_threads(1)
    from t2g_core.config.ppo import PPOConfig

    out_dir = results_dir(args.smoke)
    if args.smoke:
        args.steps, args.batch_size, args.max_new_tokens = 2, 4, 8
        args.workdir = str(PPO_SMOKE_WORK)  # the policy bench_ppo_sample_efficiency --smoke builds, too
    if args.policy is None:
        build = argparse.Namespace(  # bench_ppo_sample_efficiency's warm start (its default sizes)
            workdir=args.workdir,
            sft_steps=5 if args.smoke else 600,
            lm_steps=0 if args.smoke else 300,
            smoke=args.smoke,
        )
        args.policy = str(Summarization(build).build_policy(0))

    from t2g_core.demo import make_demo_feedback
    from t2g_core.ppo import train
    from t2g_core.ppo.sources import oracle_source

    prompts = make_demo_feedback("summarization", 16 if args.smoke else 256, seed=1)
    out = {}
    for mode in ("span", "scalar", "uniform", "dense"):
        cfg = PPOConfig(
            reward_mode=mode,
            reward_source="oracle",
            steps=args.steps,
            batch_size=args.batch_size,
            minibatches=1,
            max_new_tokens=args.max_new_tokens,
            eval_every=10**6,
            log_every=args.steps,
            save_every=args.steps,
        )
        res = train(cfg, args.policy, prompts, Path(args.workdir) / mode, reward_source=oracle_source("summarization"))
        hist = res.history[1:]  # step 0 includes one-off warm-up costs
        step = statistics.fmean(h["time/step"] for h in hist)
        phases = {ph: statistics.fmean(h[f"time/{ph}"] for h in hist) for ph in PHASES}
        out[mode] = {
            "step_s": step,
            "phases_s": phases,
            "phase_fraction": {k: v / step for k, v in phases.items()},
            "span_overhead_fraction": (phases["span_labels"] + phases["rewards"]) / step,
            "response_tokens": statistics.fmean(h["response/length"] for h in hist),
        }
        print(
            f"{mode:6s} step {step:.3f} s | "
            + " ".join(f"{k} {v * 1000:.1f} ms ({v / step:.1%})" for k, v in phases.items())
            + f" | span labels + rewards/GAE = {out[mode]['span_overhead_fraction']:.2%} of the step"
        )
    out["config"] = vars(args)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ppo_step.json").write_text(json.dumps(out, indent=1))
    print(f"results: {out_dir / 'ppo_step.json'}")


if __name__ == "__main__":
    main()
