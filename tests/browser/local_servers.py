"""`prefect server start` and `mlflow server` on free 127.0.0.1 ports for the browser tests, stopped by their PID."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from t2g_env.kept_databases import place

BIN = Path(sys.executable).parent
QUIET = {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 (loopback)
            return resp.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def _process(command: list[str], env: dict, health: str, log: Path, timeout: float = 240) -> Iterator[None]:
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while not _healthy(health):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{command[0]} did not start: {log.read_text()[-2000:]}")
                time.sleep(0.5)
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def prefect_server(home: Path) -> Iterator[str]:
    """A Prefect server with its UI; yields its URL (the API is ``URL/api``). Its new database starts as the kept copy,
    as deployments/up.sh starts its own."""
    place(home / "prefect.db", "prefect")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= QUIET | {"PREFECT_HOME": str(home), "PREFECT_SERVER_API_PORT": str(port), "PREFECT_UI_API_URL": f"{url}/api"}
    command = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port), "--analytics-off"]
    with _process(command, env, f"{url}/api/health", home / "server.log"):
        yield url


@contextlib.contextmanager
def mlflow_server(db: Path) -> Iterator[str]:
    """An MLflow tracking server on the SQLite file ``db`` (one made by ``t2g_mlflow.experiment.create_store``, as
    deployments/up.sh makes it, starts seconds sooner); yields its URL."""
    port = free_port()
    env = {**os.environ, **QUIET}
    command = [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{db}", "--host", "127.0.0.1"]
    # as deployments/up.sh: the server keeps the artifacts (mlflow-artifacts:, what a pinned experiment expects) and
    # runs one worker (the default, four, imports mlflow four times on start-up)
    command += ["--port", str(port), "--artifacts-destination", str(db.parent / "artifacts"), "--workers", "1"]
    with _process(command, env, f"http://127.0.0.1:{port}/health", db.parent / "mlflow.log"):
        yield f"http://127.0.0.1:{port}"
