"""The paper's loop on the demo: PPO driven by the learned reward model against PPO driven by the oracle critic.

From one warm-started demo policy (the demo's own: 1024 annotated summaries, tiny models), the reward model is
trained as the pipeline trains it (``reward_model`` defaults: the tagger), then PPO runs with the demo's PPO settings
from the same warm start with each reward source, ``--seeds`` times, each (arm, seed) a 1-thread process.

Reported per arm (mean +- sd over seeds): the held-out fact error of the warm start and after ``--steps`` steps
(64 held-out prompts of another seed, one sample each), its reduction, the learned reward model's reduction as a
share of the oracle's (goal >= 0.8), and the share of the PPO step spent scoring rollouts (goal <= 10%) with the
time per scored response. Writes ``benchmarks/results/bench_rm_ppo.json``.

    .venv/bin/python benchmarks/bench_rm_ppo.py [--seeds 3] [--steps 40] [--arms oracle,tagger,generative]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed import RM_SMOKE_OVERRIDES, RM_SMOKE_WORK, ROOT, results_dir, run_job, stay_offline

stay_offline()
sys.path.insert(0, str(ROOT))
RESULTS = results_dir()
KINDS = {"tagger": {"kind": "tagger", "init_from": "policy"}, "generative": {"kind": "generative"}}


def _pipeline(args):
    from t2g_core.config import load_config

    return load_config(None, [*(RM_SMOKE_OVERRIDES if args.smoke else []), *args.overrides])


def prepare(args) -> dict[str, str]:
    """The demo's warm-started policy and, for each learned arm, a reward model trained on the demo's annotations."""
    import torch

    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    from t2g_core.annotators import annotate
    from t2g_core.demo import make_demo_feedback
    from t2g_core.models.tiny import ensure_demo_models
    from t2g_core.reward_model.data import build_rm_data
    from t2g_core.reward_model.tagger_train import fit_tagger, tagger_examples
    from t2g_core.reward_model.train import train_rm

    pipe, work = _pipeline(args), Path(args.workdir)
    given = dict(kv.split("=", 1) for kv in args.reward_models.split(",") if kv)
    fb = make_demo_feedback("summarization", pipe.data.n_items, seed=pipe.data.seed)
    if args.policy:
        models = type("Models", (), {"policy": Path(args.policy), "base": Path(args.base or args.policy)})
    else:  # smoke: bench_rm --smoke's models when it built them (same settings and data: the same key)
        models = ensure_demo_models((RM_SMOKE_WORK if args.smoke else work) / "models", pipe.models, fb, progress=False)
    ann = annotate(fb, pipe.annotate.model_copy(update={"annotator": "reference"}), progress=False).frame
    out = {"policy": str(models.policy)}
    for arm in args.arms.split(","):
        if arm == "oracle":
            continue
        if arm in given:
            out[arm] = given[arm]
            continue
        cfg = pipe.reward_model.model_copy(update=KINDS[arm])
        start = models.policy if cfg.init_from == "policy" else models.base
        rm_df, _ = build_rm_data(fb, ann, AutoTokenizer.from_pretrained(str(start)), cfg, align_cfg=pipe.align)
        t0 = time.perf_counter()
        if cfg.kind == "tagger":
            res = fit_tagger(cfg, start, tagger_examples(rm_df, fb), work / f"rm-{arm}", overlap=pipe.align.overlap)
        else:
            res = train_rm(cfg, start, rm_df, work / f"rm-{arm}", progress=False)
        print(f"reward model {arm}: {res.adapter_dir} ({time.perf_counter() - t0:.0f} s)", flush=True)
        out[arm] = str(res.adapter_dir)
    return out


def run_arm(args) -> None:
    """One (arm, seed) PPO run in this process; writes ``run.json`` (history, warm-start evaluation, scoring time)."""
    import torch

    torch.set_num_threads(1)
    from t2g_core.demo import make_demo_feedback
    from t2g_core.ppo.sources import make_reward_source, summary_metrics
    from t2g_core.ppo.trainer import PPOTrainer
    from t2g_core.tracking import NullTracker

    pipe, paths = _pipeline(args), json.loads(args.paths)
    source_kind = "oracle" if args.arm == "oracle" else "reward_model"
    cfg = pipe.ppo.model_copy(update={"steps": args.steps, "seed": args.seed, "reward_source": source_kind})
    rm_cfg = pipe.reward_model.model_copy(update=KINDS.get(args.arm, {}))
    source = make_reward_source(source_kind, "summarization", reward_model_path=paths.get(args.arm), rm_cfg=rm_cfg)
    prompts = make_demo_feedback("summarization", 32 if args.smoke else 768, seed=1)
    eval_df = make_demo_feedback("summarization", args.n_eval, seed=2)
    out = Path(args.workdir) / "runs" / f"{args.arm}-seed{args.seed}"
    trainer = PPOTrainer(
        cfg, paths["policy"], prompts, out, reward_source=source, align_cfg=pipe.align, task_metric=summary_metrics
    )
    before = trainer.evaluate(eval_df)
    t0 = time.perf_counter()
    result = trainer.fit(tracker=NullTracker(), eval_df=eval_df)
    record = {
        "arm": args.arm,
        "seed": args.seed,
        "seconds": time.perf_counter() - t0,
        "warm_start": before,
        "history": result.history,
    }
    (out / "bench.json").write_text(json.dumps(record), encoding="utf-8")


def _launch(args, paths: dict, arm: str, seed: int) -> dict:
    cmd = [sys.executable, __file__, "--run-arm", arm, "--seed", str(seed), "--paths", json.dumps(paths)]
    cmd += ["--steps", str(args.steps), "--n-eval", str(args.n_eval), "--workdir", args.workdir]
    cmd += [x for o in args.overrides for x in ("--set", o)] + (["--smoke"] if args.smoke else [])
    run_job(cmd, f"{arm:10s} seed {seed}")
    return json.loads((Path(args.workdir) / "runs" / f"{arm}-seed{seed}" / "bench.json").read_text())


def _mean_sd(xs: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0}


def summarise(runs: list[dict], batch_size: int) -> dict:
    arms: dict[str, dict] = {}
    for arm in dict.fromkeys(r["arm"] for r in runs):
        mine = [r for r in runs if r["arm"] == arm]
        before = [r["warm_start"]["eval/task_error"] for r in mine]
        after = [r["history"][-1]["eval/task_error"] for r in mine]
        score = sum(h["time/score"] for r in mine for h in r["history"])
        step = sum(h["time/step"] for r in mine for h in r["history"])
        n_steps = sum(len(r["history"]) for r in mine)
        arms[arm] = {
            "warm_start_error": _mean_sd(before),
            "final_error": _mean_sd(after),
            "reduction": _mean_sd([b - a for b, a in zip(before, after, strict=True)]),
            "per_seed_reduction": [b - a for b, a in zip(before, after, strict=True)],
            "score_share": score / step if step else float("nan"),
            "score_ms_per_response": 1000 * score / (n_steps * batch_size) if n_steps else float("nan"),
            "seconds_per_run": statistics.fmean(r["seconds"] for r in mine),
        }
    oracle = arms.get("oracle", {}).get("reduction", {}).get("mean")
    for arm, a in arms.items():
        if oracle and arm != "oracle":
            a["share_of_oracle_reduction"] = a["reduction"]["mean"] / oracle
    return arms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--arms", default="oracle,tagger")
    p.add_argument("--n-eval", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=2, help="Threads while building models and reward models.")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="PipelineConfig override.")
    p.add_argument("--workdir", default=str(RESULTS / "bench_rm_ppo_work"))
    p.add_argument(
        "--policy", default=None, help="A warm-started policy folder (e.g. the demo's) instead of building one."
    )
    p.add_argument("--base", default=None, help="Its base folder (a generative reward model starts there).")
    p.add_argument(
        "--reward-models", default="", help="ARM=FOLDER,... trained reward models to use instead of training them."
    )
    p.add_argument("--smoke", action="store_true", help="A tiny run that only proves the script works (the suite).")
    p.add_argument("--run-arm", dest="arm", default=None, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--paths", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.smoke and not args.arm:
        args.seeds, args.steps, args.n_eval, args.workdir = 1, 1, 4, str(results_dir(smoke=True) / "bench_rm_ppo_work")
        args.overrides = ["ppo.batch_size=4", "ppo.minibatches=1", "ppo.max_new_tokens=8", *args.overrides]
    if args.arm:
        return run_arm(args)
    t0 = time.perf_counter()
    paths = prepare(args)
    jobs = [(arm, s) for s in range(args.seeds) for arm in args.arms.split(",")]
    with ThreadPoolExecutor(args.workers) as pool:
        runs = list(pool.map(lambda job: _launch(args, paths, *job), jobs))
    out = {
        "benchmark": "bench_rm_ppo",
        "arms": summarise(runs, _pipeline(args).ppo.batch_size),
        "config": {k: v for k, v in vars(args).items() if k not in ("paths", "arm", "seed")},
        "reward_models": paths,
        "wall_seconds": time.perf_counter() - t0,
        "curves": {f"{r['arm']}-seed{r['seed']}": [h.get("eval/task_error") for h in r["history"]] for r in runs},
    }
    results = results_dir(args.smoke)
    results.mkdir(parents=True, exist_ok=True)
    (results / "bench_rm_ppo.json").write_text(json.dumps(out, indent=1), encoding="utf-8")
    for arm, a in out["arms"].items():
        share = (
            f", {100 * a['share_of_oracle_reduction']:.0f}% of the oracle's" if "share_of_oracle_reduction" in a else ""
        )
        print(
            f"{arm:10s} held-out error {a['warm_start_error']['mean']:.3f} -> {a['final_error']['mean']:.3f} "
            f"(reduction {a['reduction']['mean']:.3f} +- {a['reduction']['sd']:.3f}{share}); "
            f"scoring {100 * a['score_share']:.1f}% of the step"
        )
    print(f"-> {results / 'bench_rm_ppo.json'}")
    return None


if __name__ == "__main__":
    main()
