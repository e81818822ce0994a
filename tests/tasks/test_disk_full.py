"""A full disk is reported as such by a stage, whatever disguise it takes: a file write's ENOSPC, or SQLite's
"database or disk is full" that SQLAlchemy wraps in a message about autoflush; on a real (tiny) tmpfs too."""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _work() -> None:
    """A stage's work (a stand-in function for the stage key)."""


def _autoflush_error():
    import sqlalchemy.exc

    return sqlalchemy.exc.OperationalError(
        "(raised as a result of Query-invoked autoflush; consider using a session.no_autoflush block if this flush "
        "is occurring prematurely)",
        {},
        sqlite3.OperationalError("database or disk is full"),
    )


@pytest.mark.parametrize("disguise", ["ENOSPC", "EDQUOT", "autoflush"])
def test_a_stage_reports_a_full_disk_naming_the_workspace(workspace_cfg, disguise):
    from t2g_core.disk import DiskFull
    from tasks.stage import stage

    raised = {
        "ENOSPC": OSError(errno.ENOSPC, "No space left on device"),
        "EDQUOT": OSError(errno.EDQUOT, "Disk quota exceeded"),
        "autoflush": _autoflush_error(),
    }[disguise]
    with pytest.raises(DiskFull) as info, stage(_work, "work", workspace_cfg):
        raise raised
    message = str(info.value)
    assert f"disk full: no space left on the device under {workspace_cfg.root} (" in message
    assert "MiB free" in message and "run the same command again" in message
    assert info.value.__cause__ is raised


def test_other_errors_pass_unchanged(workspace_cfg):
    from tasks.stage import stage

    with pytest.raises(ValueError, match="not about disks"), stage(_work, "work", workspace_cfg):
        raise ValueError("not about disks")


PROBE = """
    import os, sys
    ws = sys.argv[1]
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    import mlflow
    from t2g_core.config import WorkspaceConfig
    from tasks.stage import stage

    cfg = WorkspaceConfig(root=ws, mlflow_tracking_uri=f"sqlite:///{ws}/mlflow.db")
    with open(f"{ws}/filler", "wb") as f:  # fill the disk
        try:
            while True:
                f.write(b"x" * 65536)
        except OSError:
            pass

    def work():
        pass

    try:
        with stage(work, "work", cfg) as ctx:
            ctx.tracker.log_metrics({f"m{i}": float(i) for i in range(2000)}, step=0)
    except Exception as exc:
        print("RAISED", type(exc).__name__, exc)
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (user and mount namespaces)")
def test_a_full_tmpfs_is_reported_as_a_full_disk(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    mount = f"mount -t tmpfs -o size=3m none {ws}"
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "-r",
            "sh",
            "-c",
            f'{mount} && exec "$0" -c "$1" "$2"',
            sys.executable,
            textwrap.dedent(PROBE),
            str(ws),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if "mount" in probe.stderr and "RAISED" not in probe.stdout:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr[-300:]}")
    raised = next((line for line in probe.stdout.splitlines() if line.startswith("RAISED")), probe.stderr[-2000:])
    assert raised.startswith("RAISED DiskFull [Errno 28] disk full: no space left on the device under"), raised
    assert "autoflush" not in raised.split("The error was:")[0]
