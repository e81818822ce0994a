"""Where a pipeline run talks to: the local servers of `make up` when they are running, else embedded defaults.

Called by the CLI *before* prefect or mlflow is imported (Prefect reads its settings at import time):
- ``PREFECT_HOME`` = ``<workspace>/prefect`` (ephemeral API database, logs, default result storage),
- ``PREFECT_API_URL`` / ``MLFLOW_TRACKING_URI`` from ``<workspace>/run/servers.json`` (written by ``deployments/up.sh``)
  when those servers answer their health checks; otherwise Prefect runs an ephemeral API and MLflow uses
  ``sqlite:///<workspace>/mlflow.db``.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

SERVERS_FILE = "run/servers.json"


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


def prepare_environment(workspace_root: str | Path) -> dict[str, str]:
    """Set Prefect/MLflow environment for a run in this workspace; returns what was chosen (for printing)."""
    root = Path(workspace_root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_HOME", str(root / "prefect"))
    os.environ.setdefault("PREFECT_RESULTS_LOCAL_STORAGE_PATH", str(root / "prefect-results"))
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    for key, value in {
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        os.environ.setdefault(key, value)
    servers = None if os.environ.get("PREFECT_API_URL") else local_servers(root)
    if servers:
        os.environ["PREFECT_API_URL"] = servers["prefect_api"]
        os.environ.setdefault("MLFLOW_TRACKING_URI", servers["mlflow"])
    return {
        "prefect": os.environ.get("PREFECT_API_URL") or f"ephemeral API (database in {os.environ['PREFECT_HOME']})",
        "prefect_ui": (servers or {}).get("prefect_ui", ""),
        "mlflow": os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}",
    }
