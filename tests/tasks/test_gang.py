"""A PPO stage whose ``layout.ppo`` asks for 2 processes starts them itself (``accelerate launch``, DDP over gloo on
the CPU; that it equals 1 process, and that a killed rank fails the stage with that rank's error and the next run
resumes: tests/flows/test_gang_flow.py); an interrupted gang leaves no rank behind; the two ways accelerate quietly
runs one process on a host without CUDA are refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from t2g_core.config.orchestration import Layout
from t2g_core.config.stages import PPOSettings
from t2g_core.gang import GangRun, launch, launch_command
from t2g_core.progress import no_progress
from tests.core._launch import accelerate_launch
from tests.core._ppo_small import SMALL

ROOT = Path(__file__).resolve().parents[2]
TWO = Layout(processes=2)


def _spec(folder: Path) -> GangRun:
    return GangRun(function="t2g_core.stages.ppo.train", inputs={}, workspace={}, key="k", world=2, folder=str(folder))


def test_the_layout_is_not_part_of_the_stage_key(workspace_cfg):
    from tasks.caching import task_key
    from tasks.ppo import train_policy

    params = {"settings": PPOSettings(ppo=SMALL), "workspace": workspace_cfg}
    keys = {task_key(train_policy, params | {"layout": layout}) for layout in (None, Layout(), TWO)}
    assert len(keys) == 1


SLEEPER = "import os, sys, time; open(sys.argv[1] + '/pid-' + os.environ['RANK'], 'w').write(str(os.getpid()))\n"
SLEEPER += "print('ready', flush=True); time.sleep(300)"


@pytest.mark.slow
def test_an_interrupted_gang_is_stopped_with_every_rank(tmp_path):
    """A task stopped while its gang runs (its time limit, a cancelled run: an exception in the relay loop) leaves no
    rank behind, although torchrun starts each rank in a session of its own."""
    import psutil

    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    spec = _spec(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def interrupted(line):
        raise TimeoutError(f"stopped after {line!r}")

    with pytest.raises(TimeoutError):
        launch(spec, [*accelerate_launch(2), str(script), str(tmp_path)], env, interrupted, no_progress)
    time.sleep(1)  # rank 1 may still be starting when rank 0 prints
    pids = [int(text) for f in tmp_path.glob("pid-*") if (text := f.read_text())]  # a rank stopped mid-write: none
    assert pids and not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


WORLD_CHECK = "import sys; from t2g_cli._common import join_processes; join_processes(2)"
FORGETS_CPU = "import t2g_core.ppo.distributed as d; d.use_cpu = lambda: False; " + WORLD_CHECK  # PartialState()


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags, code",
    [(["--cpu"], WORLD_CHECK), (None, FORGETS_CPU)],
    ids=["launch-cpu-starts-one-process", "accelerator-without-cpu-leaves-each-rank-alone"],
)
def test_a_rank_that_accelerate_leaves_alone_is_refused(tmp_path, flags, code):
    if torch.cuda.is_available():
        pytest.skip("the traps are those of a host without CUDA")
    script = tmp_path / "rank.py"
    script.write_text(code)
    launch = accelerate_launch(2)
    if flags:
        launch = [launch[0], "launch", *flags, "--num_processes", "2", "--mixed_precision", "no"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([*launch, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "accelerate runs this process as 1 of 1" in proc.stderr and "launch asked for 2" in proc.stderr


def test_a_failed_gang_names_the_rank_that_failed_first_and_its_error(tmp_path):
    from t2g_core.gang import LAUNCHER_LOG, failure

    (tmp_path / LAUNCHER_LOG).write_text(
        "Failures:\n[1]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 7)\n"
        "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 8)\n"
    )
    (tmp_path / "rank-1.log").write_text("[rank1]: Traceback (most recent call last):\n[rank1]: ValueError: no model\n")
    message = failure(_spec(tmp_path), 1)
    assert message.startswith("rank 1 of the 2-process gang exited with code 1: ValueError: no model; its last")
    assert "Traceback" in message


def test_a_config_that_starts_one_process_is_refused(tmp_path):
    config = tmp_path / "cpu.yaml"
    config.write_text("distributed_type: MULTI_CPU\nuse_cpu: true\n")
    spec = _spec(Path("f"))
    with pytest.raises(ValueError, match="use_cpu: true"):
        launch_command(spec, TWO, config, (0, "127.0.0.1", 1))
    command = launch_command(spec, TWO, ROOT / "deployments" / "accelerate" / "ddp.yaml", (0, "127.0.0.1", 1))
    assert "--cpu" not in command and command[command.index("--num_processes") + 1] == "2"
    assert command[0] == sys.executable
