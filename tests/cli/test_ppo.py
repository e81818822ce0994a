"""``t2g ppo train`` / ``t2g ppo resume`` on the demo data with the oracle critic and the tiny fixture model."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from t2g_cli import app

runner = CliRunner()


def _sets(tiny_model_dir, tmp_path, mode, steps):
    return [
        f"workspace.root={tmp_path / 'ws'}",
        f"models.policy={tiny_model_dir}",
        f"models.reward_model_base={tiny_model_dir}",
        "data.n_items=12",
        "holdout.eval_fraction=0.25",
        f"ppo.steps={steps}",
        "ppo.batch_size=4",
        "ppo.minibatches=2",
        "ppo.ppo_epochs=1",
        "ppo.sampling.max_new_tokens=8",
        "ppo.value_model=head",
        "ppo.save_every=1",
        f"ppo.reward_mode={mode}",
        "ppo.reward_source=oracle",
        "ppo.eval_every=1",
    ]


def _args(sets, *extra):
    out = ["ppo", "train", *extra]
    for s in sets:
        out += ["--set", s]
    return out


@pytest.mark.parametrize("mode", ["span", "scalar", "uniform", "dense"])
def test_train_every_mode_then_resume(tiny_model_dir, tmp_path, mode):
    run_dir = tmp_path / "run"
    result = runner.invoke(app, _args(_sets(tiny_model_dir, tmp_path, mode, 1), "--run-dir", str(run_dir)))
    assert result.exit_code == 0, result.output
    assert (run_dir / "adapter" / "adapter_config.json").exists()
    spec = json.loads((run_dir / "run.json").read_text())
    assert spec["config"]["ppo"]["reward_mode"] == mode
    assert (
        len(pd.read_parquet(run_dir / "eval.parquet")) == 3 and len(pd.read_parquet(run_dir / "prompts.parquet")) == 9
    )
    history = json.loads((run_dir / "history.json").read_text())
    assert "eval/task_error" in history[0] and "task/error" in history[0]  # demo ground truth gives the task error
    again = runner.invoke(app, _args(_sets(tiny_model_dir, tmp_path, mode, 1), "--run-dir", str(run_dir)))
    assert again.exit_code == 2 and "t2g ppo resume" in again.output
    # extend the run to 2 steps and resume it from its checkpoint
    spec["config"]["ppo"]["steps"] = 2
    (run_dir / "run.json").write_text(json.dumps(spec))
    resumed = runner.invoke(app, ["ppo", "resume", str(run_dir)])
    assert resumed.exit_code == 0, resumed.output
    assert [h["step"] for h in json.loads((run_dir / "history.json").read_text())] == [0, 1]


def test_cli_errors_are_one_clear_line(tmp_path):
    missing = runner.invoke(app, ["ppo", "resume", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "not a PPO run folder" in missing.output
    bad = runner.invoke(app, ["ppo", "train", "--set", "ppo.reward_mode=sparse"])
    assert bad.exit_code == 2 and "reward_mode" in bad.output


def test_a_cut_short_run_json_is_named(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text('{"config": {"ppo": {"ste')
    res = runner.invoke(app, ["ppo", "resume", str(run_dir)])
    assert res.exit_code == 2 and f"{run_dir / 'run.json'}: not valid JSON" in res.output, res.output
