"""The code task: HumanEval problems with short canonical solutions, a warm start that writes failing mutants half
of the time, the sandboxed code critic as reward source and 1 - pass@1 on held-out problems as the error."""

from __future__ import annotations

import json
import os
from pathlib import Path

from t2g_core.config.models import ModelsConfig
from t2g_core.policy_prompts import render_policy_prompt
from testbed.tasks import PPOTask, tiny_config

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
        {"id": f"{prefix}-{i:04d}-{k}", "task": "code", "prompt": short_prompt(p), "response": p["canonical_solution"]}
        | {"critique": None, "reference": p["canonical_solution"], "tests": p["test"], "entry_point": p["entry_point"]}
        | {"meta": json.dumps({"task_id": p["task_id"]})}
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

        from t2g_core.demo.code import pick_mutant
        from t2g_core.models.demo_build import ensure_demo_models
        from t2g_core.models.tiny import warm_start

        torch.set_num_threads(1)
        problems = self.train_problems + self.held_out
        feedback = _code_rows(problems, 4, "sft")
        tiny = tiny_config(self.args, seed).model_copy(update={"policy_noise_steps": 0})
        models = ensure_demo_models(
            Path(self.args.workdir) / "models", ModelsConfig(), feedback, progress=False, log=print, spec=tiny
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
