"""Feedback without references (a user's critiques) is evaluated without crashing and still says whether PPO helped:
the reward model's reward per held-out response and the judge's win rate, each with a paired-bootstrap interval,
and the verdict rests on them when no reference-based metric exists."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from t2g_core.config import EvaluateConfig
from t2g_core.demo.critiques import make_human_feedback
from t2g_core.evaluation import evaluate_policies
from t2g_core.evaluation.outcome import outcome
from t2g_core.spans import ParsedFeedback
from t2g_core.stages.evaluate import promotion


def _own_feedback(n: int, task: str = "summarization") -> pd.DataFrame:
    """Human critiques, no references, no demo facts: what a user's file holds."""
    return make_human_feedback(n, seed=9).assign(meta=None, task=task)


class _CountsErrors:
    """A reward-model stand-in: every 'Berlin' in a response is a poor span, every 'Paris' a good one."""

    def critique_batch(self, rows):
        return [
            ParsedFeedback("c", ["Paris"] * ("Paris" in r["response"]), ["Berlin"] * ("Berlin" in r["response"]))
            for r in rows
        ]


def _generator(answers):
    return lambda ref, task, prompts, cfg: [[answers[str(ref)](i)] for i in range(len(prompts))]


@pytest.mark.parametrize("task", ["summarization", "qa"])
def test_without_references_the_reward_model_decides_with_an_interval(task):
    fb = _own_feedback(40, task)
    answers = {"before": lambda i: "It is in Berlin." if i % 4 else "It is in Paris.", "after": lambda i: "In Paris."}
    cfg = EvaluateConfig(max_prompts=40, bootstrap_samples=500)
    results = evaluate_policies(
        {"warm_start": "before", "ppo": "after"},
        fb,
        task,
        cfg,
        generator=_generator(answers),
        reward_scorer=_CountsErrors(),
    )
    summary = results.summary
    ppo = summary["policies"]["ppo"]["metrics"]
    assert not {"rouge1", "bleu", "token_f1", "fact_error"} & set(ppo)  # nothing to compare with: not measured
    assert ppo["rm_reward"] == 1.0 and ppo["rm_poor_spans"] == 0.0
    assert summary["policies"]["warm_start"]["metrics"]["rm_reward"] == pytest.approx(-0.5)
    comps = {c["metric"]: c for c in summary["comparisons"]}
    assert comps["rm_reward"]["verdict"] == "better" and comps["rm_reward"]["low"] > 0
    assert comps["rm_poor_spans"]["verdict"] == "better" and comps["rm_poor_spans"]["high"] < 0  # fewer is better
    decided = outcome(summary, "ppo")
    assert (decided.metric, decided.verdict, decided.after) == ("rm_reward", "better", 1.0)
    assert promotion(summary, "ppo") == ("rm_reward", 1.0)


def test_a_judge_win_rate_outranks_the_reward_model_and_a_reference_metric_outranks_both():
    summary = {
        "task": "summarization",
        "policies": {"ppo": {"metrics": {"rm_reward": 1.0}}},
        "comparisons": [{"policy": "ppo", "metric": "rm_reward", "verdict": "better"}],
        "judge": {"ppo": {"judged": 12, "win_rate": 0.3, "verdict": "worse"}},
    }
    assert outcome(summary, "ppo").metric == "judge_win_rate" and promotion(summary, "ppo") is None
    summary["policies"]["ppo"]["metrics"]["fact_error"] = 0.1
    summary["comparisons"].append({"policy": "ppo", "metric": "fact_error", "verdict": "better"})
    assert promotion(summary, "ppo") == ("fact_error", -0.1)
    assert outcome({"task": "qa", "policies": {}, "comparisons": []}, "ppo").metric is None


def fair_judge(request) -> str:
    """Prefers the answer that does not say Berlin; a tie when both or neither do."""
    text = request["messages"][1]["content"]
    one, two = text.split("## Answer 1\n", 1)[1].split("## Answer 2\n")
    bad1, bad2 = "Berlin" in one, "Berlin" in two
    return json.dumps({"reason": "r", "winner": "tie" if bad1 == bad2 else ("2" if bad1 else "1")})


@pytest.mark.slow
def test_the_evaluate_stage_on_a_reference_free_file_with_a_trained_reward_model_and_a_judge(tiny_model_dir, tmp_path):
    """The real chain on tiny models: the grounding annotator, a tagger reward model, one PPO step on it, then the
    pipeline's evaluation stage (held-out prompts, the run's own reward model, a judge over real HTTP)."""
    import torch
    from openai import OpenAI

    from t2g_core.annotators import annotate
    from t2g_core.config import AnnotateConfig, load_config
    from t2g_core.evaluation.judge import PairwiseJudge
    from t2g_core.stages import evaluate, ppo, reward_model
    from t2g_core.stages.context import StageContext
    from t2g_core.stages.refs import ModelsRef
    from t2g_core.stages.registry import settings_for
    from t2g_core.testing.openai_server import FakeOpenAIServer
    from t2g_core.workspace import Workspace

    torch.set_num_threads(1)
    store = Workspace.at(tmp_path).store
    fb = _own_feedback(16)
    fb_ref = store.write("feedback", "fb", fb, "feedback")
    ann_ref = store.write("annotations", "ann", annotate(fb, AnnotateConfig(annotator="ground")).frame, "annotations")
    models = ModelsRef.of(tiny_model_dir, tiny_model_dir)
    cfg = load_config(
        None,
        [
            "reward_model.max_steps=2",
            "reward_model.batch_size=4",
            "reward_model.val_fraction=0.3",
            "ppo.steps=1",
            "ppo.batch_size=4",
            "ppo.minibatches=1",
            "ppo.ppo_epochs=1",
            "ppo.sampling.max_new_tokens=8",
            "ppo.reward_model_gate.allow_weak=true",
            "evaluate.sampling.max_new_tokens=8",
            "evaluate.bootstrap_samples=200",
        ],
    )
    rm = reward_model.train(
        fb_ref, ann_ref, None, None, models, settings_for("reward_model", cfg), StageContext.keyed(tmp_path, "rm")
    )
    assert "truth_poor_char_f1" not in rm.metrics  # no ground truth in a user's file
    policy = ppo.train(fb_ref, models, rm, settings_for("ppo", cfg), StageContext.keyed(tmp_path, "ppo"))
    settings = settings_for("evaluate", cfg)
    with FakeOpenAIServer(answer=fair_judge) as server:
        judge = PairwiseJudge(OpenAI(base_url=server.base_url, api_key="k", max_retries=0), "judge")
        ref = evaluate.pipeline(fb_ref, models, policy, settings, StageContext.keyed(tmp_path, "eval"), judge=judge)
    summary = json.loads(open(ref.summary).read())
    for name in ("warm_start", "ppo"):
        metrics = summary["policies"][name]["metrics"]
        assert {"rm_reward", "rm_poor_spans", "length_words"} <= set(metrics)
        assert not {"rouge1", "bleu", "fact_error"} & set(metrics)
    comp = next(c for c in summary["comparisons"] if c["metric"] == "rm_reward")
    assert np.isfinite([comp["low"], comp["high"]]).all() and comp["n"] == ref.n_rows // 2
    judged = summary["judge"]["ppo"]
    assert (
        judged["judged"] + judged["failed"] == ref.n_rows // 2 and judged["low"] <= judged["win_rate"] <= judged["high"]
    )
    assert outcome(summary, "ppo").metric == "judge_win_rate"
    alone = evaluate.pipeline(fb_ref, models, policy, settings, StageContext.keyed(tmp_path, "eval-no-judge"))
    assert outcome(json.loads(open(alone.summary).read()), "ppo").metric == "rm_reward"


def test_ppo_measures_no_task_error_on_a_file_without_the_demo_facts():
    from t2g_core.ppo.sources import task_metric_for

    assert task_metric_for("summarization", _own_feedback(4)) is None  # all-null meta: nothing to score by
    assert task_metric_for("summarization", make_human_feedback(4, seed=9)) is not None
