"""Evaluating several policies on the same prompts: per-item rows, paired comparisons, table, report (the command:
tests/cli)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from t2g_core.config.evaluate import EvaluateConfig
from t2g_core.evaluation import EvalResults, comparison_table, evaluate_policies, merge_results, write_report
from tests.core._eval_feedback import _feedback

GREEDY = {"temperature": 0, "max_new_tokens": 64}  # greedy decoding at the evaluation's default budget


def scripted_generator(feedback: pd.DataFrame):
    """'base' answers with a wrong city and food everywhere; 'good' answers the reference on 25 of 30 items."""
    refs = dict(zip(feedback["prompt"], feedback["reference"], strict=False))

    def gen(ref, task, prompts, cfg):
        out = []
        for i, p in enumerate(prompts):
            wrong = refs[p].replace("lives in", "lives in Berlin near").replace("beans", "tacos")
            out.append([refs[p] if ref == "good" and i % 6 else wrong])
        return out

    return gen


@pytest.fixture(scope="module")
def results() -> EvalResults:
    fb = _feedback()
    cfg = EvaluateConfig(bootstrap_samples=500, sampling=GREEDY)
    return evaluate_policies(
        {"base": "base", "good": "good"}, fb, "summarization", cfg, generator=scripted_generator(fb)
    )


def test_items_and_summary(results):
    items, summary = results.items, results.summary
    assert len(items) == 60 and set(items["policy"]) == {"base", "good"}
    assert {"id", "sample", "prompt", "response", "status", "rouge1", "bleu", "length_words"} <= set(items.columns)
    assert (items["status"] == "ok").all()
    assert summary["baseline"] == "base" and summary["policies"]["good"]["n_items"] == 30
    assert summary["policies"]["good"]["settings"] == {
        "ref": "good",
        "decoding": "greedy",
        "max_new_tokens": 64,
        "num_samples": 1,
        "batch_size": 32,
        "seed": 0,
    }
    comps = {c["metric"]: c for c in summary["comparisons"]}
    assert comps["rouge1"]["verdict"] == "better" and comps["rouge1"]["low"] > 0
    assert comps["rouge1"]["diff"] == pytest.approx(
        summary["policies"]["good"]["metrics"]["rouge1"] - summary["policies"]["base"]["metrics"]["rouge1"]
    )
    assert comps["length_words"]["verdict"] == "lower"  # no direction for lengths: only which way it moved
    assert summary["policies"]["good"]["metrics"]["corpus_bleu"] > summary["policies"]["base"]["metrics"]["corpus_bleu"]


def test_comparison_table(results):
    table = comparison_table(results)
    lines = table.splitlines()
    assert lines[0] == "| metric | base | good | Δ good vs base (95% CI) | verdict |"
    rouge = next(line for line in lines if line.startswith("| rouge1 |"))
    cells = [c.strip() for c in rouge.strip("|").split("|")]
    base, good = (100 * results.summary["policies"][p]["metrics"]["rouge1"] for p in ("base", "good"))
    assert cells[1] == f"{base:.1f}" and cells[2] == f"{good:.1f}" and cells[4] == "better"
    assert cells[3].startswith("+") and "[" in cells[3]


def test_save_load_and_merge_separate_runs(results, tmp_path):
    results.save(tmp_path / "all")
    again = EvalResults.load(tmp_path / "all")
    assert again.summary["comparisons"] == json.loads(json.dumps(results.summary["comparisons"]))
    fb = _feedback()
    gen, cfg = scripted_generator(fb), EvaluateConfig(bootstrap_samples=500, sampling=GREEDY)
    one = evaluate_policies({"base": "base"}, fb, "summarization", cfg, generator=gen)
    two = evaluate_policies({"good": "good"}, fb, "summarization", cfg, generator=gen)
    merged = merge_results([one, two], cfg)
    assert merged.summary["comparisons"] == results.summary["comparisons"]
    with pytest.raises(ValueError, match=r"\['base'\] appear in more than one results folder"):
        merge_results([one, one], cfg)
    with pytest.raises(FileNotFoundError, match="not an evaluation results folder"):
        EvalResults.load(tmp_path)


def test_report_files(results, tmp_path):
    history = pd.DataFrame(
        {
            "step": range(5),
            "reward": [0, 1, 2, 3, 4],
            "kl": [0, 0.1, 0.2, 0.2, 0.3],
            "eval/task_error": [0.4, None, None, 0.2, None],
        }
    )  # periodic eval: gaps
    files = write_report(
        results, tmp_path / "report", {"span": history, "scalar": history.assign(reward=history.reward / 2)}
    )
    for key in ("metrics_png", "learning_curves_png"):
        assert files[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = files["report_md"].read_text()
    assert comparison_table(results) in md and "learning_curves.png" in md and '"decoding": "greedy"' in md
    assert "The reward PPO learnt from" not in md  # no reward facts given: no section


def test_report_says_which_reward_the_policy_learnt_from(results, tmp_path):
    reward = {"source": "reward_model", "kind": "tagger", "rm_truth_poor_char_f1": 0.987, "score_share": 0.0423}
    md = write_report(results, tmp_path / "report", reward=reward)["report_md"].read_text()
    section = md.split("## The reward PPO learnt from")[1]
    assert "| reward model kind | tagger |" in section
    assert "| reward model: poor-span F1 against the truth (held-out, characters) | 0.987 |" in section
    assert "| share of the PPO step spent scoring rollouts | 4.2% |" in section


def test_no_items_for_the_task_is_a_clear_error():
    with pytest.raises(ValueError, match="no 'code' items.*qa, summarization"):
        evaluate_policies({"base": "x"}, _feedback(), "code", EvaluateConfig(), generator=lambda *a: [])


def test_judge_scores_join_the_comparison():
    from openai import OpenAI

    from t2g_core.evaluation.judge import PairwiseJudge
    from t2g_core.testing import FakeOpenAIServer

    def prefer_berlin_free(req):  # the answer without the invented "Berlin" wins
        text = req["messages"][-1]["content"]
        first, second = text.split("## Answer 2")
        a, b = "Berlin" not in first, "Berlin" not in second
        return json.dumps({"winner": "tie" if a == b else "1" if a else "2"})

    fb = _feedback(12)
    cfg = EvaluateConfig(bootstrap_samples=500, sampling=GREEDY)
    with FakeOpenAIServer(answer=prefer_berlin_free) as server:
        judge = PairwiseJudge(OpenAI(base_url=server.base_url, api_key="t", max_retries=0), "judge")
        res = evaluate_policies(
            {"base": "base", "good": "good"}, fb, "summarization", cfg, generator=scripted_generator(fb), judge=judge
        )
        assert server.n_requests == 2 * 12
    j = res.summary["judge"]["good"]
    assert (j["wins"], j["ties"], j["losses"]) == (10, 2, 0) and j["win_rate"] == pytest.approx(11 / 12)
    assert j["verdict"] == "better" and j["low"] > 0.5
    assert "judge: good vs base: win rate 91.7%" in comparison_table(res)


def test_learning_curves_put_task_metrics_first_and_skip_gaps():
    from t2g_core.evaluation.report import _curve_rank

    names = ["ppo/clipfrac", "time/step", "kl/mean", "task/error", "eval/task_error", "reward/total_mean"]
    assert sorted(names, key=_curve_rank)[:4] == ["eval/task_error", "task/error", "reward/total_mean", "kl/mean"]


@pytest.mark.parametrize("damage", ["truncated summary.json", "4-byte items.parquet", "deleted folder"])
def test_broken_results_are_named_and_evaluated_again(results, tmp_path, damage):
    """What a full disk or a kill leaves behind is never reused: loading names the broken file, the evaluation stage
    logs it and evaluates again, and a cached reference to it reports the problem (so Prefect runs the stage)."""
    import shutil

    from t2g_core.stages.context import StageContext
    from t2g_core.stages.evaluate import reusable_results
    from t2g_core.stages.refs import EvaluationRef
    from t2g_core.store import BrokenFile

    out = tmp_path / "reports" / "evaluate" / "k"
    results.save(out)
    (out / "report.md").write_text("report")
    ref = EvaluationRef(
        path=str(out), summary=str(out / "summary.json"), report=str(out / "report.md"), n_rows=60, task="summarization"
    )
    lines: list[str] = []
    ctx = StageContext.keyed(tmp_path, "k", log=lines.append)
    assert ref.problem() is None and reusable_results(out, ctx) is not None and lines == []
    if damage == "truncated summary.json":
        text = (out / "summary.json").read_text()
        (out / "summary.json").write_text(text[: len(text) // 2])
        named = "summary.json: not valid JSON"
    elif damage == "4-byte items.parquet":
        (out / "items.parquet").write_bytes(b"PAR1")
        named = "items.parquet: not a readable Parquet file"
    else:
        shutil.rmtree(out)
        named = "not an evaluation results folder"
    assert named in (ref.problem() or "")
    if damage != "deleted folder":
        with pytest.raises(BrokenFile, match=named):
            EvalResults.load(out)
        assert reusable_results(out, ctx) is None
        assert len(lines) == 1 and named in lines[0] and "evaluating again" in lines[0]
    else:
        assert reusable_results(out, ctx) is None  # nothing there: a plain first evaluation


def test_results_are_written_atomically(results, tmp_path, monkeypatch):
    """A write that fails half-way (a full disk) leaves no summary beside the items: nothing to mistake for done."""
    import errno

    import t2g_core.store as store

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    results.save(tmp_path)
    monkeypatch.setattr(store.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        results.save(tmp_path)
    assert not (tmp_path / "summary.json").exists() and not list(tmp_path.glob(".*tmp*"))
