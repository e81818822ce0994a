"""The servers of the end-to-end tests: `deployments/up.sh` on free ports (stopped by `deployments/down.sh`), and a
process work pool with the stage flows deployed on it and a worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.browser.local_servers import free_port

ROOT = Path(__file__).resolve().parents[2]
POOL = "t2g-e2e-pool"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """One set for a module's tests (start-up and shutdown cost about 20 s each time); its tests share an xdist
    group, so they share a worker."""
    ws = tmp_path_factory.mktemp("e2e") / "ws"
    monkeypatch = pytest.MonkeyPatch()
    env = {
        **os.environ,
        "PREFECT_PORT": str(free_port()),
        "MLFLOW_PORT": str(free_port()),
        "SENSOR_INTERVAL": "2",  # a file is announced two listings after it lands
        "DEBOUNCE_SECONDS": "2",
        "PREFECT_RUNNER_POLL_FREQUENCY": "2",
        "VENV_BIN": str(Path(sys.executable).parent),
        "SOME_SECRET_VAR": "s3cret-database-password",  # what the exfiltration request asks the serve process for
    }
    for key in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "PREFECT_HOME", "PREFECT_SERVER_DATABASE_CONNECTION_URL"):
        env.pop(key, None)
    up = subprocess.run(
        ["bash", "deployments/up.sh", str(ws)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    pids = {p.stem: int(p.read_text()) for p in (ws / "run").glob("*.pid")}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        info = json.loads((ws / "run" / "servers.json").read_text())
        info["auth"] = Path(info["prefect_auth_file"]).read_text()
        user, _, password = Path(info["mlflow_auth_file"]).read_text().partition(":")
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)  # this test's MLflow clients, and the worker's
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
        yield ws, info
    finally:
        subprocess.run(["bash", "deployments/down.sh", str(ws)], cwd=ROOT, env=env, timeout=120)
        time.sleep(1)
        monkeypatch.undo()
        assert [n for n, pid in pids.items() if _alive(pid)] == [], "down.sh left processes running"


@pytest.fixture
def worker(servers):
    """A process work pool with the stage flows deployed on it (``deployments/serve.py --pool``) and a worker."""
    ws, info = servers
    env = {
        **os.environ,
        "PREFECT_API_URL": info["prefect_api"],
        "MLFLOW_TRACKING_URI": info["mlflow"],
        "PREFECT_API_AUTH_STRING": info["auth"],
        "PREFECT_WORKER_QUERY_SECONDS": "2",  # as the serve process's PREFECT_RUNNER_POLL_FREQUENCY (default 10)
    }
    bin_dir = Path(sys.executable).parent
    for cmd in (
        [str(bin_dir / "prefect"), "work-pool", "create", POOL, "--type", "process"],
        [sys.executable, "deployments/serve.py", "--workspace", str(ws), "--pool", POOL, "--groups", "evaluate"],
    ):
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # the worker serves under the policy serve.py printed for it: the placed stage flow checks its parameters too
    policy = next(line for line in done.stdout.splitlines() if "export T2G_SERVE_POLICY=" in line)
    env["T2G_SERVE_POLICY"] = policy.split("export T2G_SERVE_POLICY=", 1)[1].strip("'")
    log = open(ws / "run" / "worker.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(bin_dir / "prefect"), "worker", "start", "--pool", POOL, "--type", "process"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield ws, info
    finally:
        # prefect's worker command turns a first signal into a SIGINT to itself and waits on; a second one kills it
        for sig, wait_s in ((signal.SIGTERM, 2), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            if proc.poll() is None:
                os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    pass
        log.close()
