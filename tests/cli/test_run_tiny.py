"""`t2g run --preset tiny` as shipped, end to end; the run form's tiny preset runs the same configuration; a failed
run says its cause once, in one last `error:` line that names what to change (a full disk:
tests/tasks/test_disk_full.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flows.text2grad import text2grad
from t2g_core.config import PipelineConfig, load_config
from t2g_core.config.presets import with_preset

T2G = str(Path(sys.executable).parent / "t2g")
ENV = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "PREFECT_HOME")}


def t2g_run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([T2G, "run", *args], env=ENV, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_tiny_preset_as_shipped_trains_and_a_gate_failure_ends_with_one_error_line(tmp_path):
    ws = tmp_path / "ws"
    done = t2g_run("-w", str(ws), "--preset", "tiny")  # exactly as the README offers it
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert list(ws.glob("checkpoints/ppo/*/adapter/adapter_config.json"))  # a trained policy
    (summary,) = ws.glob("reports/evaluate/*/summary.json")
    assert json.loads(summary.read_text())["policies"]["ppo"]["metrics"]  # evaluated
    assert re.search(r"Pipeline finished in \d+ s with \d+ torch threads\.", done.stdout)  # the figures' condition

    # the same run with the preset's weak-reward-model allowance off stops at PPO's gate (upstream stages reused)
    failed = t2g_run("-w", str(ws), "--preset", "tiny", "--set", "ppo.reward_model_gate.allow_weak=false")
    output = failed.stdout + failed.stderr
    assert failed.returncode == 1, output[-4000:]
    assert "Traceback" not in output, output[-6000:]
    assert output.count("below its quality floor") == 1, output[-6000:]  # the cause, once
    last = output.strip().splitlines()[-1]
    assert last.startswith("error: pipeline Failed: PPO does not start") and "Likely cause:" in last, last
    assert "set ppo.reward_model_gate.allow_weak=true" in last and "The same command stops here again" in last
    log = (ws / "run" / "t2g-run.log").read_text(encoding="utf-8")
    assert "Traceback" in log and "WeakRewardModel" in log  # Prefect's tracebacks stay in the log file


def test_the_run_form_with_the_tiny_preset_runs_what_t2g_run_runs(tmp_path):
    """What the Prefect UI posts (every field of the form, at its default unless changed, and the preset) validated
    as the flow validates its parameters: the configuration `t2g run --preset tiny` runs (tested above)."""
    form = PipelineConfig().model_dump(mode="json", by_alias=True)
    form["workspace"]["root"] = str(tmp_path / "ws")
    params = text2grad.validate_parameters({"preset": "tiny", "config": form})
    assert with_preset(params["config"], params["preset"]) == load_config(
        None, [f"workspace.root={tmp_path / 'ws'}"], "tiny"
    )
