"""What `t2g run` and `make up` write is private to their user: no group or other permission bits on the workspace, its
databases, artifacts and results, whatever umask the user started with (before: 0644 files and 0755 folders, so
``prefect.db``, ``mlflow.db`` and the artifacts the deployment API guards were readable by any local user)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRITE = """
    import sqlite3, sys
    from t2g_cli.runtime import prepare_environment
    from t2g_core.demo import make_demo_feedback
    from t2g_core.workspace import Workspace

    prepare_environment(sys.argv[1])
    ws = Workspace.at(sys.argv[1])
    ws.store.write("feedback", "k1", make_demo_feedback("qa", 2), "feedback")
    sqlite3.connect(ws.mlflow_db).execute("create table t (a)")
"""


def _open_to_others(root: Path) -> list[str]:
    paths = [root, *root.rglob("*")]
    return [f"{p} {oct(p.stat().st_mode & 0o7777)}" for p in paths if p.stat().st_mode & 0o077]


def _loose_umask() -> None:
    os.umask(0o022)


def test_what_t2g_run_writes_is_private(tmp_path):
    ws = tmp_path / "ws"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WRITE), str(ws)],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        preexec_fn=_loose_umask,  # noqa: PLW1509
        check=True,
        timeout=120,
    )
    assert (ws / "mlflow.db").exists() and list((ws / "artifacts" / "feedback").rglob("*.parquet"))
    assert _open_to_others(ws) == []


def test_what_make_up_writes_is_private(tmp_path):
    """up.sh run as far as it goes without an installed environment (a VENV_BIN with no python): what it wrote before
    it needed one (the workspace, its run, prefect, mlartifacts and inbox folders, the auth files) is private."""
    ws = tmp_path / "ws"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    up = subprocess.run(
        ["bash", "deployments/up.sh", str(ws)],
        cwd=ROOT,
        env={**env, "VENV_BIN": str(tmp_path / "no-venv")},
        preexec_fn=_loose_umask,  # noqa: PLW1509
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert up.returncode != 0 and (ws / "run" / "prefect-auth").exists() and (ws / "inbox").is_dir()
    assert _open_to_others(ws) == []
