"""What the benchmarks share: where results go, the PPO tasks, the tiny smoke models, the job process.

Every script imports it as a sibling module (``from testbed import ...``): Python puts a script's own folder first on
``sys.path``, so no path trick is needed.

- Results: ``$T2G_BENCH_RESULTS`` (default ``benchmarks/results/``), ``--smoke`` runs in its ``smoke/`` subfolder;
  the test suite points it at a temporary folder, so a smoke run writes nothing into the source tree.
- PPO tasks (``TASKS``, each a :class:`PPOTask`): the warm-started policy, the RL prompts, the held-out prompts, the
  reward source and the task metric, and one PPO run on them evaluated on the held-out prompts.
- Jobs: ``run_job`` runs one benchmark run as a 1-thread process; ``stay_offline`` keeps the Hub and telemetry off.
- Smoke models: the PPO and reward-model benchmarks build the same tiny models at ``--smoke`` size, once, in one
  folder each (``PPO_SMOKE_WORK``, ``RM_SMOKE_WORK``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_ENV = "T2G_BENCH_RESULTS"


def results_dir(smoke: bool = False) -> Path:
    """Where a benchmark writes its results (``smoke``: the smoke/ subfolder of it)."""
    root = Path(os.environ.get(RESULTS_ENV) or ROOT / "benchmarks" / "results")
    return root / "smoke" if smoke else root


PPO_SMOKE_WORK = results_dir(smoke=True) / "work-ppo"  # bench_ppo_sample_efficiency --smoke's models; bench_ppo_step's
RM_SMOKE_WORK = results_dir(smoke=True) / "bench_rm_work"  # bench_rm --smoke's models; bench_rm_ppo --smoke's
RM_SMOKE_ITEMS = 24
RM_SMOKE_OVERRIDES = [  # a base that only has to exist, a few training steps
    f"data.n_items={RM_SMOKE_ITEMS}",
    "checks.small_tagger_data=true",  # a smoke run: the tagger on too few items is meant
    "models.tiny.vocab_size=256",
    "models.tiny.hidden_size=32",
    "models.tiny.intermediate_size=64",
    "models.tiny.warm_start_steps=2",
    "models.tiny.policy_sft_steps=2",
    "models.tiny.policy_noise_steps=1",
    "models.tiny.policy_sft_examples=32",
    "reward_model.max_steps=2",
    "reward_model.max_new_tokens=16",
    "reward_model.max_target_tokens=4096",
    "reward_model.max_prompt_tokens=4096",
]
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "DO_NOT_TRACK": "1",
}
JOB_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def stay_offline() -> None:
    """Default the Hub and telemetry switches to off in this process and those it starts (the models are local)."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


def run_job(cmd: list[str], label: str) -> None:
    """One benchmark run as a 1-thread process from the repository root; raises with its stderr's tail if it fails."""
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **JOB_ENV}, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{proc.stderr[-3000:]}")
    print(f"  {label}: {time.time() - t0:.0f} s", flush=True)


# ----------------------------------------------------------------------------------------------------------------
# tasks: warm start, prompts, held-out prompts, reward source, task metric. Each is built from a benchmark's parsed
# options: workdir, smoke, lm_steps, sft_steps, n_eval (code also code_noise_steps, code_eval_copies).
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


class PPOTask:
    """A task PPO is measured on: subclasses give the warm start, the prompts, the held-out prompts, the reward
    source and the task metric; :meth:`fit` is one PPO run on them."""

    name: str
    error_label: str  # what the held-out error is, for a figure's axis

    def __init__(self, args):
        self.args = args

    def fit(self, cfg, policy: str | Path, out: Path) -> dict:
        """PPO from ``policy``: the held-out evaluation of the warm start (no update yet: the same for every run of a
        policy), the training history with its periodic held-out evaluations, and the seconds both took."""
        from t2g_core.ppo import PPOTrainer
        from t2g_core.tracking import NullTracker

        prompts, eval_df = self.prompts(), self.eval_df()
        source = self.reward_source(eval_df)
        t0 = time.time()
        trainer = PPOTrainer(cfg, policy, prompts, out, reward_source=source, task_metric=self.metric(source))
        warm = trainer.evaluate(eval_df)
        history = trainer.fit(tracker=NullTracker(), eval_df=eval_df).history
        return {"warm_eval": warm, "history": history, "seconds": time.time() - t0}


class Summarization(PPOTask):
    name, error_label = "summarization", "1 - correct facts / 8"

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


class Code(PPOTask):
    name, error_label = "code", "1 - pass@1"

    def __init__(self, args):
        super().__init__(args)
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


def demo_policy(workdir: str, smoke: bool) -> str:
    """The demo's warm-started summarization policy, built as bench_ppo_sample_efficiency builds it (cached in
    ``workdir``): the shared starting point of the PPO cost benchmarks."""
    import argparse

    build = argparse.Namespace(
        workdir=workdir, sft_steps=5 if smoke else 600, lm_steps=0 if smoke else 300, smoke=smoke
    )
    return str(Summarization(build).build_policy(0))


def clock() -> tuple[float, float]:
    """(process CPU seconds, wall seconds) now, after the GPU's queued work has finished: on CPU the process time is
    what a loaded machine's other processes do not inflate; on a GPU only the synchronised wall time means anything."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.process_time(), time.perf_counter()


BF16_PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense bf16 tensor-core peaks (SXM data sheets)


def peak_flops() -> float | None:
    """The GPU's dense bf16 peak, or None (a CPU, or a GPU this table does not know)."""
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((v for k, v in BF16_PEAK_FLOPS.items() if k in name), None)
