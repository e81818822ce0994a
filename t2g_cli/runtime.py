"""Where a pipeline run talks to: the local servers of `make up` when they are running, else embedded defaults.

Called by the CLI *before* prefect or mlflow is imported (Prefect reads its settings at import time):
- ``PREFECT_HOME`` = ``<workspace>/prefect`` (API database, logs, default result storage),
- ``PREFECT_API_URL`` / ``MLFLOW_TRACKING_URI`` from ``<workspace>/run/servers.json`` (written by ``deployments/up.sh``)
  when those servers answer their health checks, ``PREFECT_API_AUTH_STRING`` and ``MLFLOW_TRACKING_USERNAME`` /
  ``MLFLOW_TRACKING_PASSWORD`` from the credential files it names;
  otherwise a temporary Prefect API server (the one Prefect itself would start for an ephemeral run) that dies with
  this process, even on ``kill -9``, and MLflow uses ``sqlite:///<workspace>/mlflow.db``.

While ``t2g run`` runs the pipeline (:func:`run_log`), Prefect's log also goes to ``<workspace>/run/t2g-run.log``,
tracebacks included, and the console leaves out what a failed task or flow run logs (its traceback, its error lines,
its final state): the command ends with one ``error:`` line instead, and Prefect's API keeps the rest for the UI.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import ctypes
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from t2g_core.locks import folder_lock
from t2g_env.kept_databases import seeded

SERVERS_FILE = "run/servers.json"
RUN_LOG = "run/t2g-run.log"
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
FAILED_STATE = re.compile(r"Finished in state (?!Completed|Cached)")
TELEMETRY_OFF = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
QUIET = {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # transformers' "Loading weights" / "Writing model shards" bars
OURS = ("t2g_core", "t2g_cli", "t2g_mlflow", "t2g_env", "tasks", "flows", "deployments", "__main__")
PR_SET_PDEATHSIG = 1
OWN_DATABASE_URL = {"PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL"}


def quiet_libraries() -> None:
    """No deprecation warnings from the libraries (ours still show, to be fixed), no per-load progress bars from
    transformers, and MLflow's system-metrics monitor only when something goes wrong. Called at the CLI entry and
    by ``prepare_environment``, before the libraries are imported."""
    import logging
    import warnings

    not_ours = rf"(?!({'|'.join(OURS)})(\.|$))"
    for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category, module=not_ours)
    for key, value in QUIET.items():
        os.environ.setdefault(key, value)
    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
    # MLflow's SQL store logs each database error with its traceback before raising it; the error itself reaches the
    # command's one error line (a full disk during a stage's end printed 60 lines of traceback first)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback health check)
            return resp.status == 200
    except OSError:
        return False


def local_servers(workspace_root: str | Path) -> dict | None:
    """``{"prefect_api": ..., "prefect_ui": ..., "mlflow": ...}`` of a running `make up`, or None."""
    path = Path(workspace_root).resolve() / SERVERS_FILE
    if not path.exists():
        return None
    info = json.loads(path.read_text(encoding="utf-8"))
    if healthy(f"{info['prefect_api']}/health") and healthy(f"{info['mlflow']}/health"):
        return info
    return None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()  # its own process group: a Ctrl-C in the terminal reaches the CLI, which stops the server itself
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: the atexit stop below still covers every exit but SIGKILL
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_temporary_prefect(timeout_s: float = 180.0) -> str:
    """Start Prefect's own API app (as Prefect's ephemeral mode does) in a child process bound to this one: it
    ends when this process ends, however it ends. Returns the API URL at once, ``PREFECT_API_URL`` set to it: the flows
    are imported while it starts (1.4 s less per `t2g run`); :func:`prefect_started` waits for it to answer.

    Two commands starting at once in one workspace would both create and migrate the same new SQLite database (one
    of them then fails on "duplicate column"); the database's lock is held until this server answers, so the second
    start waits and finds the database migrated. A new workspace's database starts as a copy of the last one this
    Prefect version migrated (:mod:`t2g_env.kept_databases`): the server answered in 3.8 s instead of 10.3 s.
    """
    global _starting
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect")
    home.mkdir(parents=True, exist_ok=True)
    database = home / "prefect.db"
    held = contextlib.ExitStack()  # the lock and the database's copy, until the server answers
    with contextlib.ExitStack() as failing:
        failing.enter_context(held)
        held.enter_context(folder_lock(database, f"a Prefect server starting (pid {os.getpid()})", wait_s=timeout_s))
        if not (database.exists() or OWN_DATABASE_URL & set(os.environ)):  # else the database is the user's choice
            held.enter_context(seeded(database, "prefect"))
        proc, url, log = _spawn_temporary_prefect()  # in this thread: the child's parent-death signal follows it
        failing.pop_all()

    def answered() -> str:
        with held:
            _wait_answering(proc, url, log, timeout_s)
        return url

    _starting = concurrent.futures.ThreadPoolExecutor(1, "prefect-start").submit(answered)
    return url


_starting: concurrent.futures.Future | None = None


def prefect_started() -> None:
    """Wait until the temporary server :func:`start_temporary_prefect` started answers (its error, if it failed)."""
    if _starting is not None:
        _starting.result()


def _spawn_temporary_prefect() -> tuple[subprocess.Popen, str, Path]:
    import importlib.util

    prefect_dir = Path(importlib.util.find_spec("prefect").origin).parent  # not imported: settings are read at import
    port = _free_port()
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    app = ["--app-dir", str(prefect_dir.parent), "--factory", "prefect.server.api.server:create_app"]
    server = ["--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"]
    command = [sys.executable, "-m", "uvicorn", *app, *server]
    log = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect") / "server.log"
    with open(log, "ab") as out:  # its errors (a database that cannot grow) are its own, not the command's output
        proc = subprocess.Popen(  # noqa: PLW1509
            command, env=env, preexec_fn=_die_with_parent, stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    atexit.register(_stop, proc)
    url = f"http://127.0.0.1:{port}/api"
    os.environ["PREFECT_API_URL"] = url
    os.environ["PREFECT_UI_URL"] = ""  # it serves no UI and ends with this process: no page to link (tasks.links)
    return proc, url, log


def _wait_answering(proc: subprocess.Popen, url: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not healthy(f"{url}/health", timeout=1.0):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise RuntimeError(f"the temporary Prefect server did not start (exit code {proc.poll()}; see {log})")
        time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def prepare_environment(workspace_root: str | Path, *, start_prefect: bool = False) -> dict[str, str]:
    """Set Prefect/MLflow environment for a run in this workspace; returns what was chosen (for printing).

    ``start_prefect`` starts the temporary Prefect server when no server is configured or running (``t2g run``).
    What this process and its servers write from here on (the workspace, databases, artifacts, results) is private to
    this user (umask 077); the inbox that others may drop files into keeps a mode of its own (docs/operations.md).
    """
    os.umask(0o077)
    quiet_libraries()
    root = Path(workspace_root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_HOME", str(root / "prefect"))
    os.environ.setdefault("PREFECT_RESULTS_LOCAL_STORAGE_PATH", str(root / "prefect-results"))
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    for key, value in TELEMETRY_OFF.items():
        os.environ.setdefault(key, value)
    servers = None if os.environ.get("PREFECT_API_URL") else local_servers(root)
    if servers:
        os.environ["PREFECT_API_URL"] = servers["prefect_api"]
        os.environ.setdefault("MLFLOW_TRACKING_URI", servers["mlflow"])
        auth_file = Path(servers.get("prefect_auth_file") or root / "run" / "prefect-auth")
        if auth_file.is_file() and "PREFECT_API_AUTH_STRING" not in os.environ:
            os.environ["PREFECT_API_AUTH_STRING"] = auth_file.read_text(encoding="utf-8").strip()
        mlflow_auth = Path(servers.get("mlflow_auth_file") or root / "run" / "mlflow-auth")
        if mlflow_auth.is_file() and "MLFLOW_TRACKING_PASSWORD" not in os.environ:
            user, _, password = mlflow_auth.read_text(encoding="utf-8").strip().partition(":")
            os.environ.update(MLFLOW_TRACKING_USERNAME=user, MLFLOW_TRACKING_PASSWORD=password)
    prefect = os.environ.get("PREFECT_API_URL")
    if prefect is None and start_prefect:
        prefect = (
            f"{start_temporary_prefect()} (temporary server, database in {os.environ['PREFECT_HOME']}; it ends "
            "with this command)"
        )
    return {
        "prefect": prefect or f"ephemeral API (database in {os.environ['PREFECT_HOME']})",
        "prefect_ui": (servers or {}).get("prefect_ui", ""),
        "mlflow": os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}",
    }


def _shown(record: logging.LogRecord) -> bool:
    """Whether the console shows ``record``: not what a failed task or flow run logs (its traceback, its error lines,
    "Finished in state Failed(...)"), each of which repeats the cause the command's ``error:`` line says once."""
    if not record.name.startswith(RUN_LOGGERS):
        return True
    return record.levelno < logging.ERROR and not record.exc_info and not FAILED_STATE.match(record.getMessage())


@contextlib.contextmanager
def run_log(workspace_root: str | Path) -> Iterator[Path]:
    """While the pipeline runs in this process: Prefect's log appended to ``<workspace>/run/t2g-run.log`` (tracebacks
    included), failures kept off the console (:func:`_shown`), and a log that cannot be written (a full disk) never
    printed about. Yields the log file's path."""
    from prefect.logging.handlers import APILogWorker, PrefectConsoleHandler

    path = Path(workspace_root).resolve() / RUN_LOG
    root = logging.getLogger()
    consoles = [h for h in root.handlers if isinstance(h, PrefectConsoleHandler)]
    path.parent.mkdir(parents=True, exist_ok=True)
    file = logging.FileHandler(path, encoding="utf-8")
    file.setFormatter(consoles[0].formatter if consoles else logging.Formatter("%(asctime)s | %(name)s - %(message)s"))
    raising, logging.raiseExceptions = logging.raiseExceptions, False
    root.addHandler(file)
    for console in consoles:
        console.addFilter(_shown)
    try:
        yield path
    finally:
        with contextlib.suppress(Exception):  # the logs still on their way to the API, while its errors stay unsaid
            APILogWorker.drain_all(timeout=5)
        for console in consoles:
            console.removeFilter(_shown)
        root.removeHandler(file)
        with contextlib.suppress(OSError):  # what is left to write on a full disk
            file.close()
        logging.raiseExceptions = raising
