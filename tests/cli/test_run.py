"""`t2g lineage` errors and `t2g run`'s processes: an unknown version is one clear line; nothing outlives `t2g run`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from t2g_cli import app


def test_lineage_of_an_unknown_version_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    result = CliRunner().invoke(app, ["lineage", "7", "--workspace", str(tmp_path)])
    assert result.exit_code == 2
    assert "no model version text2grad-policy '7'" in result.output
    assert "no model named text2grad-policy is registered yet" in result.output


def test_lineage_of_an_unknown_alias_lists_the_versions_and_aliases(tmp_path, monkeypatch):
    from t2g_core.config import WorkspaceConfig
    from t2g_mlflow import registry, runs

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with runs.stage_run("ppo", {}, WorkspaceConfig(root=str(tmp_path))):
        registry.log_adapter_model(adapter, "text2grad-policy", alias="candidate")
    result = CliRunner().invoke(app, ["lineage", "champion", "--workspace", str(tmp_path)])
    assert result.exit_code == 2
    assert "versions 1; aliases candidate -> 1; no version is champion yet" in result.output


@pytest.mark.slow
def test_kill_9_of_t2g_run_leaves_no_prefect_server_behind(tmp_path):
    """The temporary Prefect API server `t2g run` starts ends with it, even when it is killed with SIGKILL."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from t2g_cli.runtime import healthy

    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "PREFECT_HOME")}
    t2g = Path(sys.executable).parent / "t2g"
    proc = subprocess.Popen(
        [str(t2g), "run", "-w", str(tmp_path / "ws")],
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        match = re.search(r"Prefect: (http://127\.0\.0\.1:\d+/api)", line)
        assert match, line
        deadline = time.monotonic() + 120  # the line comes as the server starts (the flows load meanwhile)
        while not healthy(f"{match.group(1)}/health") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert healthy(f"{match.group(1)}/health")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 20
        while healthy(f"{match.group(1)}/health", timeout=0.5) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not healthy(f"{match.group(1)}/health", timeout=0.5), "the temporary Prefect server outlived t2g run"
    finally:
        if proc.poll() is None:
            proc.kill()
