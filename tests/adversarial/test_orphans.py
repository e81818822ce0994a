"""Nothing a command starts outlives it: the sandbox's processes die with the process that started them, even when
that one is killed with SIGKILL (no chance to clean up). The temporary Prefect server of `t2g run` is covered in
tests/cli/test_run.py."""

# ruff: noqa: E501 - the hanging program below is data
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from t2g_core.critics import isolation

MARK = b"Plain values across the sandbox boundary"  # the first line of every sandbox script
HANG = """
import sys
from t2g_core.critics.sandbox import SandboxLimits, run_cases
program = "def f(x):\\n    while True:\\n        try:\\n            pass\\n        except BaseException:\\n            pass\\n"
print("started", flush=True)
run_cases(program, [{"code": "def check(candidate):\\n    assert candidate(1) == 2\\n"}], "f",
          SandboxLimits(timeout_s=60, isolation=sys.argv[1]))
"""


def _sandbox_processes() -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if MARK in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        try:  # /proc/<pid>/stat: "pid (comm) state ppid ..."
            pid = int((Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
    return False


@pytest.mark.parametrize("backend", [b for b in ("bwrap", "unshare") if isolation.works(b)])
def test_sandbox_processes_die_with_a_killed_parent(backend):
    """The sandbox processes this parent started, found by their ancestry before it is killed: another test's sandbox
    starting meanwhile (the other test worker runs code critics too) once made this test fail."""
    parent = subprocess.Popen([sys.executable, "-c", HANG, backend], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "started"

        def started() -> set[int]:
            return {pid for pid in _sandbox_processes() if _descends_from(pid, parent.pid)}

        deadline = time.monotonic() + 30
        while len(started()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        ours = started()
        assert len(ours) >= 2, "the judge and the candidate never started"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while ours & set(_sandbox_processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not ours & set(_sandbox_processes()), "sandbox processes outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
