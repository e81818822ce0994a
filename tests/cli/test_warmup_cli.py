"""``t2g warmup`` trains the warm-up (reused when finished) and ``t2g ppo train`` with warmup.enabled starts from it."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from t2g_cli import app


def _cli_sets(tiny_model_dir, tmp_path) -> list[str]:
    sets = [
        f"workspace.root={tmp_path / 'ws'}",
        f"models.policy={tiny_model_dir}",
        f"models.reward_model_base={tiny_model_dir}",
        "data.n_items=12",
        "warmup.steps=2",
        "warmup.batch_size=4",
        "warmup.lora.r=4",
        "ppo.steps=1",
        "ppo.batch_size=4",
        "ppo.minibatches=1",
        "ppo.ppo_epochs=1",
        "ppo.sampling.max_new_tokens=8",
        "ppo.value_model=head",
        "ppo.reward_source=oracle",
    ]
    return [arg for s in sets for arg in ("--set", s)]


def test_t2g_warmup_then_t2g_ppo_train_starts_from_the_warmed_up_policy(tiny_model_dir, tmp_path):
    torch.set_num_threads(1)
    runner = CliRunner()
    sets = _cli_sets(tiny_model_dir, tmp_path)
    first = runner.invoke(app, ["warmup", *sets])
    assert first.exit_code == 0, first.output
    warmed = first.output.split("warmed-up policy: ")[1].split()[0]
    assert "checkpoints/warmup/warmup-" in warmed and Path(warmed, "warmup.json").is_file()
    again = runner.invoke(app, ["warmup", *sets])  # the same inputs: reused
    assert again.exit_code == 0 and f"warmed-up policy: {warmed}" in again.output and "resumed" not in again.output

    run_dir = tmp_path / "run"
    ppo = runner.invoke(app, ["ppo", "train", *sets, "--set", "warmup.enabled=true", "--run-dir", str(run_dir)])
    assert ppo.exit_code == 0, ppo.output
    assert json.loads((run_dir / "run.json").read_text())["policy_dir"] == warmed
    plain = runner.invoke(app, ["ppo", "train", *sets, "--run-dir", str(tmp_path / "plain")])
    assert plain.exit_code == 0 and json.loads((tmp_path / "plain" / "run.json").read_text())["policy_dir"] == str(
        tiny_model_dir
    )
