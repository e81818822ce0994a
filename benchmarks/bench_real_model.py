"""A real pretrained model end to end on CPU: warm-up, reward model, span PPO and scalar PPO from the same warm-up.

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import json
import platform
import re
import statistics
import time
from functools import partial
from pathlib import Path

from testbed import ROOT, SMOKE_TINY_MODELS, parser, results_dir, save_json, stay_offline

from t2g_core.codehash import code_digest
from t2g_core.config import load_config
from t2g_core.config import stages as settings

stay_offline()

RECIPE = ROOT / "recipes" / "summarization-smollm2.yaml"
SMOKE = [  # tiny demo models and a few steps of everything: the script's path, not its figures
    "data.n_items=100",  # the frozen tagger scores every item once: 1000 were half the smoke run
    "checks.small_tagger_data=true",
    "holdout.eval_fraction=0.04",  # 4 held-out items
    "models.policy=tiny",
    "models.reward_model_base=tiny",
    *SMOKE_TINY_MODELS,
    "warmup.steps=2",
    "warmup.batch_size=4",
    "policy_samples.enabled=true",
    "policy_samples.prompts=4",
    "policy_samples.sampling.max_new_tokens=8",
    "reward_model.max_steps=2",
    "reward_model.batch_size=4",
    "reward_model.eval_max_items=4",
    "ppo.steps=2",
    "ppo.batch_size=4",
    "ppo.minibatches=1",
    "ppo.ppo_epochs=1",
    "ppo.sampling.max_new_tokens=8",
    "ppo.eval_every=1",
    "ppo.reward_model_gate.allow_weak=true",
    "evaluate.max_prompts=4",
    "evaluate.sampling.max_new_tokens=8",
    "evaluate.bootstrap_samples=100",
]
METRICS = ("fact_error", "invented_entity_rate", "fact_recall", "fact_precision")


# ------------------------------------------------------------------------------------------------ measuring a stage
def _peak_rss_gb() -> float:
    text = Path("/proc/self/status").read_text(encoding="utf-8")
    return int(re.search(r"VmHWM:\s+(\d+)", text).group(1)) / 1024**2


def _reset_peak() -> None:
    """Start the peak-memory count afresh (Linux: writing 5 to clear_refs resets VmHWM)."""
    try:
        Path("/proc/self/clear_refs").write_text("5", encoding="utf-8")
    except OSError:  # not Linux, or not allowed: the peak is then the process's so far
        pass


class Stages:
    """Runs stage functions in one workspace, each under its key, recording wall, CPU seconds and peak memory."""

    def __init__(self, work: Path):
        self.work, self.cost = work, {}

    def context(self, name: str, stage: str, params: dict):
        """The stage's context: outputs under its key (its code, settings and inputs) in the work folder."""
        from t2g_core.stages.context import StageContext, stage_key

        key = stage_key(stage, code_digest(f"t2g_core.stages.{stage}"), params)
        return StageContext.keyed(self.work / "ws", key, log=lambda m: print(f"  [{name}] {m}", flush=True))

    def run(self, name: str, fn, stage: str | None = None, **params):
        """``fn(ctx)`` for a stage (``stage``, default ``name``; its context keyed by ``params``), else ``fn()``;
        measured."""
        ctx = self.context(name, stage or name, params) if params else None
        _reset_peak()
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(ctx) if params else fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        self.cost[name] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "peak_rss_gb": round(_peak_rss_gb(), 2)}
        print(f"{name}: {wall:.0f} s wall, {cpu:.0f} CPU-s, peak {self.cost[name]['peak_rss_gb']} GB", flush=True)
        return out


# ------------------------------------------------------------------------------------------------ the pipeline's core
def run_pipeline(cfg, stages: Stages, modes: tuple[str, ...] = ("span", "scalar")) -> dict:
    """Feedback -> models -> warm-up -> annotations -> reward model -> span PPO and scalar PPO (``modes``); their
    references."""
    from t2g_core.stages import annotate, feedback, models, policy_samples, ppo, reward_model, warmup
    from t2g_core.stages.refs import SourceRef

    src, data = SourceRef.of(cfg.data), settings.FeedbackSettings.from_pipeline(cfg)
    fb = stages.run("feedback", partial(feedback.materialise, src, data), source=src, settings=data)
    built_with = settings.ModelsSettings.from_pipeline(cfg)
    built = stages.run("models", partial(models.build, fb, built_with), feedback=fb, settings=built_with)
    ws = settings.WarmupSettings(
        warmup=cfg.warmup.model_copy(update={"enabled": True}), holdout=cfg.holdout, models=cfg.models
    )
    start = stages.run("warmup", partial(warmup.warm_up, fb, built, ws), feedback=fb, models=built, settings=ws)
    an = settings.AnnotateSettings.from_pipeline(cfg)
    ann = stages.run("annotate", partial(annotate.annotate, fb, an), feedback=fb, settings=an)
    samples = None
    if cfg.policy_samples.enabled:
        ss = settings.PolicySamplesSettings.from_pipeline(cfg)
        sample = partial(policy_samples.sample, fb, start, ss)
        samples = stages.run("policy_samples", sample, feedback=fb, models=start, settings=ss)
    rs = settings.RewardModelSettings.from_pipeline(cfg)
    train = partial(reward_model.train, fb, ann, None, None, built, rs, samples=samples)
    rm = stages.run("reward_model", train, feedback=fb, annotations=ann, models=built, settings=rs, samples=samples)
    runs = {}
    for mode in modes:
        ps = settings.PPOSettings.from_pipeline(
            cfg.model_copy(update={"ppo": cfg.ppo.model_copy(update={"reward_mode": mode})})
        )
        inputs = {"feedback": fb, "models": start, "reward_model": rm, "settings": ps}
        runs[mode] = stages.run(f"ppo_{mode}", partial(ppo.train, fb, start, rm, ps), "ppo", **inputs)
    return {"feedback": fb, "models": built, "warmup": start, "policy_samples": samples, "reward_model": rm, **runs}


def held_out_evaluation(cfg, refs: dict, stages: Stages, modes: tuple[str, ...]) -> dict:
    """Every policy on PPO's held-out prompts, sampled as PPO samples; comparisons with the warm-up policy."""
    import pandas as pd

    from t2g_core.evaluation import evaluate_policies
    from t2g_core.models.loading import default_device, resolve_dtype
    from t2g_core.stages.io import read

    held = set(pd.read_parquet(Path(refs[modes[0]].run_dir) / "eval.parquet")["id"])
    frame = read(refs["feedback"], "feedback")
    frame = frame[frame["id"].isin(held)].reset_index(drop=True)
    ev = cfg.evaluate.model_copy(update={"sampling": cfg.ppo.sampling})
    policies = {
        "base": refs["models"].policy,
        "warm_start": refs["warmup"].policy,
        **{mode: refs[mode].adapter_dir for mode in modes},
    }
    device = default_device()  # the GPU when there is one, as the pipeline's evaluation stage
    dtype = resolve_dtype(cfg.models.dtype, device)
    evaluate = partial(evaluate_policies, policies, frame, "summarization", ev, baseline="warm_start")
    results = stages.run("evaluate", lambda: evaluate(device=str(device), dtype=dtype))
    means = {name: entry["metrics"] for name, entry in results.summary["policies"].items()}
    comparisons = [c for c in results.summary["comparisons"] if c["metric"] in METRICS]
    return {
        "n_prompts": len(frame),
        "settings": ev.model_dump(mode="json"),
        "means": means,
        "vs_warm_start": comparisons,
        "annotator_reward": annotator_rewards(results.items, modes),
    }


def annotator_rewards(items, modes: tuple[str, ...]) -> dict:
    """The annotator's (reference critic's) verdict on every held-out response, per span: good spans minus poor spans
    minus omissions (PPO pays a poor span per token); per policy its mean, and each PPO policy's paired per-prompt
    difference from the others'."""
    import numpy as np

    from t2g_core.critics.reference import ReferenceCritic
    from t2g_core.evaluation.reward import span_reward

    critic = ReferenceCritic()
    rows = items.to_dict("records")
    feedback = critic.critique_batch(rows)
    paid = [span_reward(r["response"], fb)["rm_reward"] - len(fb.missing) for r, fb in zip(rows, feedback, strict=True)]
    items = items.assign(reward=paid)
    per_prompt = items.groupby(["policy", "id"])["reward"].mean().unstack("policy")
    out = {"mean": {p: round(float(per_prompt[p].mean()), 4) for p in per_prompt}, "paired": {}}
    first = items[items["id"].isin(sorted(set(items["id"]))[:3]) & (items["sample"] == 0)]
    out["examples"] = first[["id", "policy", "response", "reward"]].to_dict("records")  # 3 prompts, every policy
    rng = np.random.default_rng(0)
    for a in modes:
        for b in [m for m in ("scalar", "warm_start", *modes) if m != a and m in per_prompt]:
            diff = (per_prompt[a] - per_prompt[b]).dropna().to_numpy()
            boot = rng.choice(diff, size=(2000, len(diff))).mean(axis=1)
            ci = [round(float(q), 4) for q in np.quantile(boot, [0.025, 0.975])]
            out["paired"][f"{a}-{b}"] = {"mean": round(float(diff.mean()), 4), "ci95": ci, "n": len(diff)}
    return out


def steps_to_target(history_path: str, target: float) -> dict:
    """PPO's periodic held-out errors and the first step (1-based: updates done) at or below ``target``."""
    history = json.loads(Path(history_path).read_text(encoding="utf-8"))
    curve = [(int(h["step"]) + 1, float(h["eval/task_error"])) for h in history if "eval/task_error" in h]
    reached = next((step for step, err in curve if err <= target), None)
    loop = "critique_loop/"
    rounds = [  # the critique loop's audits: agreement with the annotator, the panel's gap test, rollback
        {"step": int(h["step"]) + 1} | {k.removeprefix(loop): v for k, v in h.items() if loop in k}
        for h in history
        if f"{loop}round" in h
    ]
    seconds = {  # per step, mean: the whole step and each part (time/teacher: self-distillation's extra pass)
        key: round(statistics.mean(h[key] for h in history if key in h), 2)
        for key in sorted({k for h in history for k in h if k.startswith("time/")})
    }
    return {
        "eval_error_by_step": curve,
        "seconds_per_step": seconds,
        "steps_to_target": reached,
        "final_train_error": history[-1].get("task/error"),
        "critique_loop": rounds,
    }


# ------------------------------------------------------------------------------------------------ main
def parse_args():
    ap = parser(__doc__)
    ap.add_argument("--recipe", type=Path, default=RECIPE, help="The pipeline configuration (a recipe file).")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="PipelineConfig override.")
    ap.add_argument("--target", type=float, default=0.3, help="Relative error reduction PPO is timed to.")
    ap.add_argument("--modes", default="span,scalar", help="PPO runs from the warm-up: span, scalar or both.")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=None, help="Work folder (default: <results>/bench_real_model_work).")
    ap.add_argument("--out", default="bench_real_model.json", help="Results file name, in the results folder.")
    args = ap.parse_args()
    if args.smoke:  # one thread: the suite runs it beside another test, and a second one only contends for a core
        args.overrides, args.threads = [*SMOKE, *args.overrides], 1
    args.work = args.work or results_dir(args.smoke) / "bench_real_model_work"
    return args


def _means(evaluation: dict, policy: str) -> dict:
    return {m: evaluation["means"].get(policy, {}).get(m) for m in METRICS}


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    cfg = load_config(args.recipe, [f"workspace.root={args.work / 'ws'}", *args.overrides])
    stages = Stages(args.work)
    t0, c0 = time.perf_counter(), time.process_time()
    modes = tuple(args.modes.split(","))
    refs = run_pipeline(cfg, stages, modes)
    evaluation = held_out_evaluation(cfg, refs, stages, modes)
    warm_error = _means(evaluation, "warm_start")["fact_error"]
    target = None if warm_error is None else (1 - args.target) * warm_error
    out = {
        "benchmark": "bench_real_model",
        "policy": cfg.models.policy,
        "smoke": args.smoke,
        "stages": stages.cost,
        "total": {"wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1)},
        "reward_model": {"kind": refs["reward_model"].kind, "held_out": refs["reward_model"].metrics},
        "held_out": evaluation,
        "target": {"relative_reduction": args.target, "fact_error": target},
        "ppo": {m: steps_to_target(refs[m].history_path, target if target is not None else -1.0) for m in modes},
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": args.threads,
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        },
        "config": cfg.model_dump(mode="json", by_alias=True, exclude={"workspace", "placement", "timeouts"}),
    }
    save_json(results_dir(args.smoke) / args.out, out, indent=2)
    for policy in ("base", "warm_start", *modes):
        print(
            f"{policy:11s} " + " ".join(f"{k}={v:.3f}" for k, v in _means(evaluation, policy).items() if v is not None)
        )
    print(json.dumps(out["ppo"], indent=1))


if __name__ == "__main__":
    main()
