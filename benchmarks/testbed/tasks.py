"""The PPO tasks the benchmarks measure: warm start, prompts, held-out prompts, reward source, task metric, and one
PPO run on them evaluated on a schedule. Each is built from a benchmark's parsed options: workdir, smoke, lm_steps,
sft_steps, n_eval (code also code_noise_steps, code_eval_copies)."""

from __future__ import annotations

import json
import time
from collections.abc import Container, Sequence
from pathlib import Path

from t2g_core.config.models import ModelsConfig
from t2g_core.tracking import NullTracker


def tiny_config(args, seed: int):
    from t2g_core.models.tiny import TinySpec

    fields = dict(seed=seed, warm_start_steps=args.lm_steps, policy_sft_steps=args.sft_steps, policy_sft_lr=3e-3)
    fields |= dict(policy_sft_batch_size=32, warm_start_batch_size=32)
    if args.smoke:  # a policy that only has to exist
        fields |= dict(vocab_size=256, hidden_size=32, intermediate_size=64, policy_noise_steps=2)
        fields |= dict(policy_sft_examples=64, policy_sft_batch_size=8)
    return TinySpec(**fields)


class KeptResponses:
    """A task metric that, while ``keep`` is set (a held-out evaluation), also keeps the (row id, response) pairs it
    scored: the responses a benchmark diagnoses or re-scores after the run."""

    def __init__(self, metric):
        self.metric, self.keep, self.kept = metric, False, []

    def __call__(self, rows: list[dict], responses: list[str]):
        if self.keep:
            self.kept = [(row["id"], text) for row, text in zip(rows, responses, strict=True)]
        return self.metric(rows, responses)


def train_evaluated(trainer, eval_df, metric: KeptResponses, eval_at: Sequence[int], keep_at: Container[int] = ()):
    """PPO to ``trainer.cfg.steps`` with a held-out evaluation of the warm start and after each number of steps
    trained in ``eval_at`` (its ``eval/*`` metrics join that step's history row); ``trainer.fit`` runs the steps in
    between, so a step is the pipeline's own. Returns (warm-start evaluation, history, {steps trained: the kept
    responses} for the evaluations in ``keep_at``)."""
    steps = trainer.cfg.steps
    if any(not 1 <= s <= steps for s in eval_at):
        raise ValueError(f"evaluations after {sorted(eval_at)} steps: each must be in 1..{steps}")
    kept: dict[int, list] = {}

    def evaluate(done: int) -> dict:
        metric.keep = done in keep_at
        out = trainer.evaluate(eval_df)
        if metric.keep:
            kept[done] = metric.kept
        metric.keep = False
        return out

    warm = evaluate(0)
    for done in sorted(set(eval_at)):
        trainer.fit(tracker=NullTracker(), stop_after=done - trainer.next_step)
        trainer.history[-1] |= evaluate(done)
    if trainer.next_step < steps:
        trainer.fit(tracker=NullTracker())
    return warm, trainer.history, kept


class PPOTask:
    """A task PPO is measured on: subclasses give the warm start, the prompts, the held-out prompts, the reward
    source and the task metric; :meth:`fit` is one PPO run on them."""

    name: str
    error_label: str  # what the held-out error is, for a figure's axis

    def __init__(self, args):
        self.args = args

    def fit(self, cfg, policy: str | Path, out: Path, eval_at: Sequence[int], keep_at: Container[int] = ()) -> dict:
        """PPO from ``policy`` evaluated on the held-out prompts before training (the same for every run of a
        policy) and after each number of steps in ``eval_at`` (:func:`train_evaluated`): the warm-start evaluation,
        the history, the held-out responses at the steps in ``keep_at``, and the seconds it all took."""
        from t2g_core.ppo import PPOTrainer

        prompts, eval_df = self.prompts(), self.eval_df()
        source = self.reward_source(eval_df)
        metric = KeptResponses(self.metric(source))
        t0 = time.time()
        trainer = PPOTrainer(cfg, policy, prompts, out, reward_source=source, task_metric=metric)
        warm, history, kept = train_evaluated(trainer, eval_df, metric, eval_at, keep_at)
        return {"warm_eval": warm, "history": history, "responses": kept, "seconds": time.time() - t0}

    def diagnose(self, responses: list[tuple[str, str]]) -> dict | None:
        """What the held-out responses still get wrong, where the task has ground truth to say it (else None)."""
        return None


class Summarization(PPOTask):
    name, error_label = "summarization", "1 - correct facts / 8"

    def build_policy(self, seed: int) -> Path:
        """The demo's warm-started policy (clean SFT, then facts wrong at p_halluc), built with model seed ``seed``."""
        import torch

        from t2g_core.demo import make_demo_feedback
        from t2g_core.models.demo_build import ensure_demo_models

        torch.set_num_threads(1)
        feedback = make_demo_feedback("summarization", 256, seed=0)
        spec, work = tiny_config(self.args, seed), Path(self.args.workdir) / "models"
        models = ensure_demo_models(work, ModelsConfig(), feedback, progress=False, log=print, spec=spec)
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

    def diagnose(self, responses: list[tuple[str, str]]) -> dict:
        return fact_profile(self.eval_df(), responses)


def fact_profile(eval_df, responses: list[tuple[str, str]]) -> dict:
    """Per slot, the share of the (row id, response) pairs whose value is correct / invented / swapped / missing,
    against the facts in ``eval_df``'s demo meta (:func:`t2g_core.evaluation.diagnosis.fact_error_profile`)."""
    from t2g_core.evaluation.diagnosis import fact_error_profile

    facts = {row.id: json.loads(row.meta)["facts"] for row in eval_df.itertuples()}
    return fact_error_profile([(facts[i], text) for i, text in responses])
