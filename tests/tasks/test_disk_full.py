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

from t2g_env.kept_databases import kept_copy

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


def on_a_tmpfs(folder: Path, megabytes: int, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``argv`` run with a ``megabytes`` MB tmpfs mounted on ``folder`` (in its own mount namespace); skips the test
    when this machine cannot mount one."""
    mount = f'mount -t tmpfs -o size={megabytes}m none {folder} || exit 97; exec "$@"'
    done = subprocess.run(
        ["unshare", "-m", "-r", "sh", "-c", mount, "sh", *argv], capture_output=True, text=True, **kwargs
    )
    if done.returncode == 97 or done.stderr.startswith("unshare:"):
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr[-300:]}")
    return done


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (user and mount namespaces)")
def test_a_full_tmpfs_is_reported_as_a_full_disk(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    probe = on_a_tmpfs(
        ws,
        3,
        [sys.executable, "-c", textwrap.dedent(PROBE), str(ws)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    raised = next((line for line in probe.stdout.splitlines() if line.startswith("RAISED")), probe.stderr[-2000:])
    assert raised.startswith("RAISED DiskFull [Errno 28] disk full: no space left on the device under"), raised
    assert "autoflush" not in raised.split("The error was:")[0]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (user and mount namespaces)")
def test_a_full_disk_ends_t2g_run_with_one_error_line_naming_the_workspace(tmp_path, monkeypatch):
    """`t2g run` on a 6 MB disk: Prefect's server answers 500 (its database cannot grow) and the run ends with one
    line naming the workspace and its free space (before: 1,520 lines of tracebacks and no error line). A kept copy
    of a migrated database too large for the disk is not copied: the server migrates its own (before: the copy's
    error named the current folder and the command exited 2)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    t2g = str(Path(sys.executable).parent / "t2g")
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "PREFECT_HOME")}
    template = kept_copy("prefect")
    template.parent.mkdir(parents=True)
    template.write_bytes(b"\0" * (7 << 20))  # larger than the disk
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = on_a_tmpfs(mnt, 6, [t2g, "run", "-w", str(mnt / "ws"), "--preset", "tiny"], env=env, timeout=500)
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output[-6000:]
    last = output.strip().splitlines()[-1]
    assert last.startswith(f"error: disk full: no space left on the device under {mnt / 'ws'} ("), last
    assert "MiB free" in last
