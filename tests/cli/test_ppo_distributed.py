"""`t2g ppo train` under ``accelerate launch`` on two CPU processes: the command docs/gpu.md gives."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.core._launch import accelerate_launch


@pytest.mark.slow
def test_t2g_ppo_train_under_accelerate_launch(tiny_model_dir, tmp_path):
    """The command docs/gpu.md gives, on two CPU processes: the CLI joins the process group, rank 0 prepares the
    data and models first, both processes warm the policy up (``warmup.enabled``: one DDP run, rank 0 writes) and
    train PPO from it, process 0 draws the progress bar."""
    sets = [
        f"workspace.root={tmp_path / 'ws'}",
        f"models.policy={tiny_model_dir}",
        f"models.reward_model_base={tiny_model_dir}",
        "data.n_items=12",
        "warmup.enabled=true",
        "warmup.steps=2",
        "warmup.batch_size=4",
        "warmup.lora.r=4",
        "ppo.steps=2",
        "ppo.batch_size=4",
        "ppo.minibatches=2",
        "ppo.ppo_epochs=1",
        "ppo.sampling.max_new_tokens=8",
        "ppo.value_model=head",
        "ppo.reward_source=oracle",
    ]
    run_dir = tmp_path / "run"
    command = [*accelerate_launch(2), "-m", "t2g_cli", "ppo", "train", "--run-dir", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [*command, *(a for s in sets for a in ("--set", s))], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    info = json.loads((run_dir / "models.json").read_text())
    assert info["processes"] == 2 and info["distributed"] == "MULTI_CPU"
    assert len(json.loads((run_dir / "history.json").read_text())) == 2
    warmed = Path(json.loads((run_dir / "run.json").read_text())["policy_dir"])
    assert warmed.parent.parent.name == "warmup"  # PPO started from the warm-up both processes trained
    assert json.loads((warmed / "warmup.json").read_text())["global_step"] == 2
    assert "ppo: 100%" in proc.stderr and "reward=" in proc.stderr and "kl=" in proc.stderr
