"""Self-distillation credit beside span rewards on the demo: the same critiques (the oracle reference critic's), the
same warm start, budget and seeds; the seed is the unit.

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from testbed import (
    PPO_SMOKE_WORK,
    Summarization,
    curves,
    demo_policy,
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

ARMS: dict[str, dict] = {  # ppo.self_distillation beside --teacher and --weight; span: off
    "span": {},
    "sd_raw": {"mode": "replace", "judge": False},
    "sd": {"mode": "replace"},
    "sd_adv_raw": {"mode": "replace", "judge": False, "placement": "advantage"},
    "sd_adv": {"mode": "replace", "placement": "advantage"},
    "both_raw": {"mode": "add", "judge": False},
    "both": {"mode": "add"},
}
CRITIQUES = ("own", "rendered", "blank")
BLANK = "No comment."  # a critique that says nothing: what the template alone does to the teacher
SMOKE = dict(steps=2, batch_size=4, max_new_tokens=8, n_eval=4, seeds=1, signal_prompts=4, workers=1)
SMOKE |= dict(arms="span,sd_adv,both")  # both placements


def ppo_config(args, arm: str, seed: int, **extra):
    sd = {"teacher": args.teacher, "weight": args.weight} | ARMS[arm]
    fields = dict(minibatches=1, learning_rate=args.lr, lam=0.95, max_approx_kl=0.03, value_model=args.value_model)
    return oracle_ppo_config(args, seed, fields | {"self_distillation": sd} | extra)


# ----------------------------------------------------------------------------------------------------------------
# 1. the signal
# ----------------------------------------------------------------------------------------------------------------


def signal(args, policy: str, seed: int) -> dict:
    """Per critique kind: the correlation of l_t with the labels and the mean l_t by label, on one seed's batch."""
    import torch

    from t2g_core.ppo import PPOTrainer
    from t2g_core.ppo.experience import old_ref_values
    from t2g_core.ppo.rewards import decode, labels_tensor
    from t2g_core.ppo.rollout import rollout
    from t2g_core.ppo.scoring import label_responses

    task = Summarization(args)
    source = task.reward_source(None)
    sd = {"mode": "add", "judge": False, "clip": 1e6}  # the teacher as it is
    cfg = ppo_config(args, "span", seed, batch_size=args.signal_prompts, self_distillation=sd)
    trainer = PPOTrainer(cfg, policy, task.prompts(), Path(args.workdir) / "signal", reward_source=source)
    rows, index = trainer.local_rows(0)
    tok = trainer.bundle.tokenizer
    ro = rollout(trainer.generate, tok, rows, index, cfg, 0)
    decoded = decode(ro, tok)
    feedback = source.critique_batch([{**r, "response": t} for r, (t, _) in zip(rows, decoded, strict=True)])
    scored = label_responses(decoded, feedback, None)
    old = old_ref_values(trainer.model, ro, cfg, "cpu")[0]
    mask, labels = ro.response_mask, labels_tensor(scored, tuple(ro.response_mask.shape))
    kinds = {"own": lambda fb: fb, "rendered": lambda fb: dataclasses.replace(fb, critique=None)}
    kinds["blank"] = lambda fb: dataclasses.replace(fb, critique=BLANK)
    out = {}
    for kind, change in kinds.items():
        told = [dataclasses.replace(s, feedback=change(s.feedback)) for s in scored]
        ratio = trainer.teacher.read(trainer.model, ro, told, old, "cpu").ratio[mask]
        lab = labels[mask]
        r = torch.corrcoef(torch.stack([ratio, lab]))[0, 1]
        by_label = (("poor", lab < 0), ("good", lab > 0), ("other", lab == 0))
        out[kind] = {"pearson": float(r)} | {
            f"mean_{k}": float(ratio[sel].mean()) if sel.any() else None for k, sel in by_label
        }
    example = next(s for s in scored if s.feedback.ok)
    out["example"] = {"response": example.text, "critique": example.feedback.critique}
    return out


# ----------------------------------------------------------------------------------------------------------------
# 2. the arms (each run in a subprocess)
# ----------------------------------------------------------------------------------------------------------------


def run_one(args, spec: dict, out: Path) -> dict:
    if spec["arm"] == "signal":
        return {**spec, "signal": signal(args, spec["policy"], spec["seed"])}
    keep = ("eval/", "sd/", "time/", "reward/", "kl/", "task/", "response/")
    cfg = ppo_config(args, spec["arm"], spec["seed"])
    run = Summarization(args).fit(cfg, spec["policy"], out, se.eval_schedule(args.steps, 2, dense=8))
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    history = [{k: v for k, v in h.items() if k == "step" or k.startswith(keep)} for h in run["history"]]
    return {**spec, **run, "history": history, "responses": {}}


SHARED = ("steps", "batch_size", "max_new_tokens", "n_eval", "lr", "value_model", "teacher", "weight")
SHARED += ("signal_prompts", "workdir", "smoke", "lm_steps", "sft_steps")


def spec(args, arm: str, seed: int, policy: str) -> dict:
    key = key_of([shared_flags(args, SHARED), policy, ARMS.get(arm)])
    return {"arm": arm, "seed": seed, "policy": policy, "out": str(Path(args.workdir) / "runs" / arm / key / str(seed))}


def arm_summary(runs: list[dict], steps: int) -> dict:
    """Per seed: steps to 0.5x the warm-start error (None: not within the run), the final error, the teacher's share
    of a step; their means."""
    to_half = [se.steps_to(curves.curve(r), 0.5 * curves.curve(r)[0][1]) for r in runs]
    final = [curves.curve(r)[-1][1] for r in runs]
    taught = all("time/teacher" in h for r in runs for h in r["history"])
    cost = [statistics.fmean(h["time/teacher"] / h["time/step"] for h in r["history"]) for r in runs] if taught else []
    return {
        "seeds": [r["seed"] for r in runs],
        "warm_error": [curves.curve(r)[0][1] for r in runs],
        "steps_to_0.5": to_half,
        "steps_to_0.5_mean": statistics.fmean(se.censor(to_half, steps)),
        "reached_0.5": sum(s is not None for s in to_half),
        "final_error": final,
        "final_error_mean": statistics.fmean(final),
        "final_length": [r["history"][-1]["response/length"] for r in runs],
        "teacher_share_of_step": cost,
        "teacher_share_of_step_mean": statistics.fmean(cost) if cost else None,
        "seconds_per_run": statistics.fmean(r["seconds"] for r in runs),
    }


def versus_span(table: dict, runs: list[dict], steps: int) -> dict:
    """Each arm minus span, seed by seed (same warm start, prompts and sampling streams): final error and steps."""
    by = {(r["arm"], r["seed"]): r for r in runs}
    out = {}
    for arm in table:
        if arm == "span":
            continue
        seeds = [s for s in table[arm]["seeds"] if ("span", s) in by]
        d_final = [curves.curve(by[(arm, s)])[-1][1] - curves.curve(by[("span", s)])[-1][1] for s in seeds]
        half = {
            a: se.censor([table[a]["steps_to_0.5"][table[a]["seeds"].index(s)] for s in seeds], steps)
            for a in (arm, "span")
        }
        d_steps = [a - b for a, b in zip(half[arm], half["span"], strict=True)]
        out[arm] = {"final_error_diff": d_final, "steps_to_0.5_diff": d_steps} | {
            "final_error_diff_mean": statistics.fmean(d_final),
            "steps_to_0.5_diff_mean": statistics.fmean(d_steps),
        }
    return out


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def signal_summary(records: list[dict]) -> dict:
    out = {}
    for kind in CRITIQUES:
        per_seed = [r["signal"][kind] for r in records]
        out[kind] = {k: [p[k] for p in per_seed] for k in per_seed[0]}
        out[kind] |= {f"{k}_mean": _mean([p[k] for p in per_seed]) for k in per_seed[0]}
    return out | {"example": records[0]["signal"]["example"]}


def parse_args() -> argparse.Namespace:
    p = parser(__doc__, publish=True)
    p.add_argument("--arms", default=",".join(ARMS), help=f"Comma-separated, from: {', '.join(ARMS)}.")
    p.add_argument("--seeds", type=int, default=3, help="PPO seeds 0..n-1 (data order, LoRA init, sampling).")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--n-eval", type=int, default=32, help="Held-out prompts per evaluation.")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--value-model", default="head", choices=("head", "separate", "lora"))
    p.add_argument("--teacher", default="policy", choices=("policy", "reference", "ema"))
    p.add_argument("--weight", type=float, default=1.0)
    p.add_argument("--signal-prompts", type=int, default=64, help="Rollouts per seed in the signal measurement.")
    p.add_argument("--lm-steps", type=int, default=300, help="Language-model steps of the warm start's base.")
    p.add_argument("--sft-steps", type=int, default=600, help="Supervised steps of the warm start.")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--workdir", default=str(results_dir() / "work-self-distillation"))
    p.add_argument("--models", default=str(results_dir() / "work-ppo-summarization"), help="Where the warm start is.")
    p.add_argument("--run-specs", dest="specs", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.smoke:
        args.__dict__.update(SMOKE)
        args.workdir, args.models, args.lm_steps, args.sft_steps = str(PPO_SMOKE_WORK / "sd"), str(PPO_SMOKE_WORK), 0, 5
    return args


def main() -> None:
    args = parse_args()
    if args.specs:
        return run_spec_file(args.specs, lambda spec, out: run_one(args, spec, out))
    arms = args.arms.split(",")
    policy = demo_policy(args.models, args.smoke)
    t0 = time.time()
    seeds = range(args.seeds)
    specs = [spec(args, "signal", s, policy) for s in seeds] + [spec(args, a, s, policy) for a in arms for s in seeds]
    cmd = [sys.executable, __file__, *shared_flags(args, SHARED)]
    per_process = len(specs) if args.smoke else 1  # a smoke run starts one interpreter, not one per run
    records = run_in_processes(cmd, specs, args.workdir, args.workers, per_process)
    runs = [r for r in records if r["arm"] != "signal"]
    table = {a: arm_summary([r for r in runs if r["arm"] == a], args.steps) for a in arms}
    result = {
        "task": "summarization",
        "reward_source": "oracle",
        "config": {k: v for k, v in vars(args).items() if k != "specs"},
        "signal": signal_summary([r for r in records if r["arm"] == "signal"]),
        "arms": table,
        "versus_span": versus_span(table, runs, args.steps) if "span" in arms else {},
        "mean_curves": curves.mean_curves(runs, arms),
        "seconds": time.time() - t0,
    }
    summary = {k: v for k, v in result.items() if k != "config"} | {
        "settings": {k: getattr(args, k) for k in SHARED if k not in ("workdir",)} | {"seeds": args.seeds}
    }
    path = write_results("self_distillation", result | {"runs": runs}, summary, smoke=args.smoke, publish=args.publish)
    print(json.dumps({k: summary[k] for k in ("signal", "arms", "versus_span")}, indent=1))
    print(f"summary: {path} ({time.time() - t0:.0f} s)")
    return None


if __name__ == "__main__":
    main()
