"""Sample efficiency of reward placements and credit-assignment estimators, each arm tuned with the same budget.

The paper's central claim, measured fairly (issue 18): every arm gets the same tuning grid (learning rate x GAE lambda
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
``--warm-starts``), ``all`` (both). Writes benchmarks/results/ppo_sample_efficiency_<task>[_<tag>].json and
docs/figures/ppo_sample_efficiency_<task>.png (held-out curves, mean and 95% bootstrap band per arm; a tagged run
keeps its figure beside its JSON).

    .venv/bin/python benchmarks/bench_ppo_sample_efficiency.py --task summarization --phase all --workers 2
    .venv/bin/python benchmarks/bench_ppo_sample_efficiency.py --smoke
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
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
# tasks: warm start, prompts, held-out prompts, reward source, task metric
# ----------------------------------------------------------------------------------------------------------------


def _tiny_cfg(args, seed: int):
    from t2g_core.config.models import TinyModelConfig

    tiny = TinyModelConfig(
        seed=seed,
        warm_start_steps=args.lm_steps,
        policy_sft_steps=args.sft_steps,
        policy_sft_batch_size=32,
        policy_sft_lr=3e-3,
        warm_start_batch_size=32,
    )
    if args.smoke:  # a policy that only has to exist
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
    return tiny


class Summarization:
    name, metric_name = "summarization", "error"

    def __init__(self, args):
        self.args = args

    def build_policy(self, seed: int) -> Path:
        """The demo's warm-started policy (clean SFT, then facts wrong at p_halluc), built with model seed ``seed``."""
        import torch

        from t2g_core.config.models import ModelsConfig
        from t2g_core.demo import make_demo_feedback
        from t2g_core.models.tiny import ensure_demo_models

        torch.set_num_threads(1)
        feedback = make_demo_feedback("summarization", 256, seed=0)
        cfg = ModelsConfig(tiny=_tiny_cfg(self.args, seed))
        models = ensure_demo_models(Path(self.args.workdir) / "models", cfg, feedback, progress=False, log=print)
        return models.policy

    def prompts(self):
        from t2g_core.demo import make_demo_feedback

        return make_demo_feedback("summarization", 32 if self.args.smoke else 512, seed=1)

    def eval_df(self):
        from t2g_core.demo import make_demo_feedback

        return make_demo_feedback("summarization", self.args.n_eval, seed=2)  # posts never trained on

    def reward_source(self, eval_df):
        from t2g_core.ppo.sources import oracle_source

        return oracle_source("summarization")

    def metric(self, source):
        from t2g_core.ppo.sources import summary_metrics

        return summary_metrics


CODE_MAX_CHARS = 80  # canonical solutions up to this long (43 HumanEval problems): 1-3 lines a tiny model can learn


def code_problems(smoke: bool, workdir: str) -> tuple[list[dict], list[dict]]:
    """(RL problems, held-out problems): short-solution HumanEval problems with a mutant that fails, split 70/30
    (the selection runs each mutant's tests once and is kept in ``workdir``)."""
    import random

    from t2g_core.demo.code import load_problems, passes_tests, pick_mutant

    cache = Path(workdir) / "code_problems.json"
    if cache.exists():
        ids = set(json.loads(cache.read_text()))
        usable = [p for p in load_problems() if p["task_id"] in ids]
    else:
        usable = [
            p
            for p in load_problems()
            if len(p["canonical_solution"]) <= CODE_MAX_CHARS
            and pick_mutant(p, random.Random(1), verify=not smoke)
            and (smoke or passes_tests(dict(p, prompt=short_prompt(p)), p["canonical_solution"]))
        ]
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps([p["task_id"] for p in usable]))
    random.Random(0).shuffle(usable)
    if smoke:
        usable = usable[:6]
    cut = int(round(0.7 * len(usable)))
    return usable[:cut], usable[cut:]


def short_prompt(problem: dict) -> str:
    """The prompt up to the entry point's signature, with the docstring cut to its first line: what names the
    problem, at a length a tiny model trains on in minutes (imports and helpers before it are kept)."""
    import ast

    prompt = problem["prompt"]
    func = next(
        n for n in ast.parse(prompt).body if isinstance(n, ast.FunctionDef) and n.name == problem["entry_point"]
    )
    lines = prompt.split("\n")
    head = lines[: func.body[0].lineno - 1]
    doc = ast.get_docstring(func) or problem["entry_point"]
    first = next((x.strip() for x in doc.splitlines() if x.strip()), problem["entry_point"]).replace('"""', "'")
    return "\n".join(head) + f'\n    """{first}"""\n'


def _code_rows(problems: list[dict], copies: int, prefix: str):
    import pandas as pd

    from t2g_core.schemas import FEEDBACK, validate_frame

    rows = [
        {
            "id": f"{prefix}-{i:04d}-{k}",
            "task": "code",
            "prompt": short_prompt(p),
            "response": p["canonical_solution"],
            "critique": None,
            "reference": p["canonical_solution"],
            "tests": p["test"],
            "entry_point": p["entry_point"],
            "meta": json.dumps({"task_id": p["task_id"]}),
        }
        for i, p in enumerate(problems)
        for k in range(copies)
    ]
    return validate_frame(pd.DataFrame(rows), FEEDBACK, f"bench:{prefix}")


class PassRecorder:
    """The code reward source: the code critic (mutation localisation on training rows, plain tests on held-out rows,
    whose spans are not trained on) that also remembers each response's verdict, so the task metric (1 - pass) costs
    no second sandbox run."""

    def __init__(self, eval_ids: set[str]):
        from t2g_core.critics.code import CodeCritic

        self.eval_ids = eval_ids
        self.train, self.held_out = CodeCritic(), CodeCritic(mutation_localisation=False)
        self.passed: dict[tuple[str, str], float] = {}

    def critique_batch(self, rows: list[dict]):
        from t2g_core.ppo.scoring import CriticSource

        out = []
        for row in rows:
            critic = self.held_out if row["id"] in self.eval_ids else self.train
            fb = CriticSource(critic).critique_batch([row])[0]
            self.passed[(row["id"], row["response"])] = float(fb.ok and fb.outcome == 1.0)
            out.append(fb)
        return out

    def metric(self, rows: list[dict], responses: list[str]) -> dict[str, list[float]]:
        fails = [1.0 - self.passed.get((row["id"], text), 0.0) for row, text in zip(rows, responses, strict=True)]
        return {"error": fails}


class Code:
    name, metric_name = "code", "error"

    def __init__(self, args):
        self.args = args
        self.train_problems, self.held_out = code_problems(args.smoke, args.workdir)

    def build_policy(self, seed: int) -> Path:
        """Clean SFT on every selected problem, then SFT on targets that are a failing mutant half of the time."""
        import random

        import torch
        from transformers import AutoTokenizer

        from t2g_core.config.models import ModelsConfig
        from t2g_core.demo.code import pick_mutant
        from t2g_core.models.tiny import ensure_demo_models, warm_start
        from t2g_core.policy_prompts import render_policy_prompt

        torch.set_num_threads(1)
        problems = self.train_problems + self.held_out
        feedback = _code_rows(problems, 4, "sft")
        tiny = _tiny_cfg(self.args, seed).model_copy(update={"policy_noise_steps": 0})
        models = ensure_demo_models(
            Path(self.args.workdir) / "models", ModelsConfig(tiny=tiny), feedback, progress=False, log=print
        )
        out = models.policy.parent / f"policy-mutants{self.args.code_noise_steps}"
        if (out / "config.json").exists():
            return out
        tok = AutoTokenizer.from_pretrained(models.policy)
        rng = random.Random(seed)
        pairs = []
        for p in problems:
            for _ in range(8):
                m = pick_mutant(p, rng, verify=not self.args.smoke) if rng.random() < 0.5 else None
                pairs.append(
                    (render_policy_prompt(tok, "code", short_prompt(p)), m.response if m else p["canonical_solution"])
                )
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        res = warm_start(
            models.policy, pairs, tiny, steps=self.args.code_noise_steps, lr=1e-3, out_dir=tmp, progress=False
        )
        tmp.rename(out)
        print(f"code policy, mutants half of the time: {len(res.losses)} steps in {res.seconds:.0f} s", flush=True)
        return out

    def prompts(self):
        return _code_rows(self.train_problems, 1, "rl")

    def eval_df(self):
        return _code_rows(self.held_out, self.args.code_eval_copies, "heldout")

    def reward_source(self, eval_df):
        self.source = PassRecorder(set(eval_df["id"]))
        return self.source

    def metric(self, source):
        return source.metric


TASKS = {"summarization": Summarization, "code": Code}


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
    from t2g_core.ppo import PPOTrainer
    from t2g_core.tracking import NullTracker

    spec = json.loads(args.spec)
    task = TASKS[spec["task"]](args)
    prompts, eval_df = task.prompts(), task.eval_df()
    source = task.reward_source(eval_df)
    out = Path(spec["out"])
    t0 = time.time()
    cfg = ppo_config(args, spec["arm"], spec["tuned"], spec["seed"])
    trainer = PPOTrainer(cfg, spec["policy"], prompts, out, reward_source=source, task_metric=task.metric(source))
    warm = trainer.evaluate(eval_df)  # the warm start itself (no update yet): the same for every run of a policy
    result = trainer.fit(tracker=NullTracker(), eval_df=eval_df)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    keep = ("task/", "eval/", "kl/", "response/", "ppo/", "value/", "grad/", "policy/", "reward/", "loss/", "lr/")
    history = [{k: v for k, v in h.items() if k == "step" or k.startswith(keep)} for h in result.history]
    record = {**spec, "warm_eval": warm, "history": history, "seconds": time.time() - t0}
    (out / "run.json").write_text(json.dumps(record))


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
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["HF_HUB_OFFLINE"] = "1"
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{spec['arm']} {spec['name']} failed:\n{proc.stderr[-3000:]}")
    print(
        f"  {spec['arm']:15s} {spec['name']:28s} ws{spec['warm_start']} seed {spec['seed']}: {time.time() - t0:.0f} s"
    )
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


def steps_to(run: dict, target: float) -> int | None:
    """Steps trained before the first held-out evaluation at or below ``target`` (None: never within the run)."""
    return next((s for s, err in curve(run)[1:] if err <= target), None)


def run_stats(run: dict, steps: int) -> dict:
    err0 = run["warm_eval"]["eval/task_error"]
    reached = {f: steps_to(run, f * err0) for f in FRACTIONS}
    final = curve(run)[-1][1]
    return {
        "warm_start_error": err0,
        "steps_to": {str(f): s for f, s in reached.items()},
        "final_error": final,
        "auc": statistics.fmean(err for _, err in curve(run)),
        # collapsed: worse at the end than the warm start, or back above half of it after having got there (relapse)
        "collapsed": final >= err0 or (reached[0.5] is not None and final > 0.5 * err0),
        "final_length": run["history"][-1].get("response/length"),
    }


def _censored(xs: list[int | None], steps: int) -> list[float]:
    return [float(x) if x is not None else float(steps + 1) for x in xs]  # not reached: counted as one past the end


def bootstrap_ci(values: list[float], n: int = 4000, seed: int = 0) -> tuple[float, float]:
    import numpy as np

    if len(values) < 2:
        return (float("nan"), float("nan"))
    arr = np.asarray(values, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(arr), size=(n, len(arr)))
    means = arr[idx].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def ratio_ci(num: list[float], den: list[float], n: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of mean(num) / mean(den), the two arms resampled independently."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    ra = a[rng.integers(0, len(a), size=(n, len(a)))].mean(axis=1)
    rb = b[rng.integers(0, len(b), size=(n, len(b)))].mean(axis=1)
    r = ra / rb
    return float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def summarise_arm(runs: list[dict], steps: int) -> dict:
    stats = [run_stats(r, steps) for r in runs]
    out = {"n_runs": len(runs), "collapsed": sum(s["collapsed"] for s in stats)}
    for f in FRACTIONS:
        raw = [s["steps_to"][str(f)] for s in stats]
        vals = _censored(raw, steps)
        out[f"steps_to_{f}"] = raw
        out[f"steps_to_{f}_mean"] = statistics.fmean(vals)
        out[f"steps_to_{f}_ci95"] = bootstrap_ci(vals)
        out[f"reached_{f}"] = sum(x is not None for x in raw)
    finals = [s["final_error"] for s in stats]
    out |= {
        "final_error": finals,
        "final_error_mean": statistics.fmean(finals),
        "final_error_ci95": bootstrap_ci(finals),
        "auc_mean": statistics.fmean(s["auc"] for s in stats),
        "warm_start_error_mean": statistics.fmean(s["warm_start_error"] for s in stats),
        "final_length_mean": statistics.fmean(s["final_length"] for s in stats if s["final_length"] is not None),
        "seconds_per_run": statistics.fmean(r["seconds"] for r in runs),
    }
    return out


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
        best = min(configs.values(), key=lambda c: (c["steps_to_0.25_mean"], c["auc_mean"]))
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


def compare(table: dict, steps: int) -> dict:
    """Best span-information arm against the best scalar-information arm (the denominator), with 95% intervals."""
    out = {}
    for f in FRACTIONS:
        key = f"steps_to_{f}_mean"
        scalar = [a for a in SCALAR_INFO if a in table]
        span = [a for a in (*SPAN_INFO, "dense") if a in table]
        if not scalar or not span:
            continue
        den = min(scalar, key=lambda a: (table[a][key], table[a]["auc_mean"]))
        best_span = min([a for a in span if a != "dense"] or span, key=lambda a: (table[a][key], table[a]["auc_mean"]))
        row = {"denominator": den, "best_span": best_span, "ratios": {}}
        den_vals = _censored(table[den][f"steps_to_{f}"], steps)
        for arm in table:
            vals = _censored(table[arm][f"steps_to_{f}"], steps)
            row["ratios"][arm] = {
                "ratio": statistics.fmean(vals) / statistics.fmean(den_vals),
                "ci95": ratio_ci(vals, den_vals),
            }
        out[str(f)] = row
    return out


# ----------------------------------------------------------------------------------------------------------------
# figure and report
# ----------------------------------------------------------------------------------------------------------------

COLOURS = {
    "scalar": "tab:blue",
    "uniform": "tab:cyan",
    "scalar_rloo": "tab:purple",
    "dense": "tab:orange",
    "span": "tab:green",
    "span_local": "tab:olive",
    "span_bootstrap": "tab:red",
    "span_rloo": "tab:brown",
    "span_grpo": "tab:pink",
}


def plot(runs: list[dict], table: dict, path: Path, task: str) -> None:
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for arm in table:
        curves = [curve(r) for r in runs if r["arm"] == arm]
        steps = sorted({s for c in curves for s, _ in c})
        steps = [s for s in steps if all(s in dict(c) for c in curves)]
        mat = np.array([[dict(c)[s] for s in steps] for c in curves])  # (runs, points)
        mean = mat.mean(axis=0)
        rng = np.random.default_rng(0)
        boot = mat[rng.integers(0, len(mat), size=(2000, len(mat)))].mean(axis=1)
        lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
        ax.plot(steps, mean, color=COLOURS.get(arm), label=f"{arm} ({table[arm]['n_runs']} runs)", lw=1.6)
        ax.fill_between(steps, lo, hi, color=COLOURS.get(arm), alpha=0.15)
    err0 = statistics.fmean(r["warm_eval"]["eval/task_error"] for r in runs)
    for f in FRACTIONS:
        ax.axhline(f * err0, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("PPO steps trained")
    ax.set_ylabel("held-out error" + (" (1 - pass@1)" if task == "code" else " (1 - correct facts / 8)"))
    ax.set_title(
        f"{task}: each arm at its best-tuned setting, mean and 95% bootstrap band\n(dashed: 0.5x and 0.25x the "
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
        args.__dict__.update(SMOKE, workdir=str(RESULTS / "smoke" / "work-ppo"))
        if not args.spec:  # every smoke run trains again (finished runs are otherwise reused)
            shutil.rmtree(Path(args.workdir) / "runs", ignore_errors=True)
    args.workdir = args.workdir or str(RESULTS / f"work-ppo-{args.task}")
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
    out_dir = RESULTS / "smoke" if args.smoke else RESULTS
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
    comparison = compare(table, args.steps)
    figure = (out_dir if args.smoke or args.tag else FIGURES) / f"{name}.png"  # ablations stay with the results
    plot(runs, table, figure, args.task)
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
