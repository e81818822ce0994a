"""`t2g eval policy` and `t2g eval report` on the tiny model: the table, the results folder, the plots, and a
missing model folder named."""

from __future__ import annotations

import json

import pytest

from t2g_core.evaluation import EvalResults
from tests.core._eval_feedback import _feedback


@pytest.mark.slow  # generates with two policies and draws the report
def test_cli_policy_and_report(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    from t2g_cli import app

    data = tmp_path / "feedback.jsonl"
    _feedback(4).to_json(data, orient="records", lines=True)
    runner = CliRunner()
    args = [
        "eval",
        "policy",
        "--model",
        f"base={tiny_model_dir}",
        "--model",
        f"again={tiny_model_dir}",
        "--data",
        str(data),
        "--task",
        "summarization",
        "-s",
        "evaluate.sampling.max_new_tokens=4",
        "-s",
        "evaluate.bootstrap_samples=200",
    ]
    out = runner.invoke(app, [*args, "-o", str(tmp_path / "res")])
    assert out.exit_code == 0, out.output
    assert "| metric | base | again |" in out.output
    res = EvalResults.load(tmp_path / "res")
    assert len(res.items) == 8 and (tmp_path / "res" / "report" / "metrics.png").exists()
    same = res.items.pivot(index="id", columns="policy", values="response")
    assert (same["base"] == same["again"]).all()  # same weights, greedy: identical answers
    hist = tmp_path / "ppo.json"
    hist.write_text(json.dumps({"history": [{"step": 0, "reward": 0.1}, {"step": 1, "reward": 0.3}]}))
    out = runner.invoke(
        app, ["eval", "report", str(tmp_path / "res"), "--history", f"span={hist}", "-o", str(tmp_path / "rep")]
    )
    assert out.exit_code == 0, out.output
    assert (tmp_path / "rep" / "learning_curves.png").exists()
    bad = runner.invoke(
        app,
        [
            "eval",
            "policy",
            "--model",
            str(tmp_path / "missing"),
            "--data",
            str(data),
            "--task",
            "qa",
            "-o",
            str(tmp_path / "x"),
        ],
    )
    assert bad.exit_code == 2 and "is not a folder" in bad.output
