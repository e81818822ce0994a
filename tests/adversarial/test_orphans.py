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

import psutil
import pytest

from t2g_core.critics import isolation

MARK = "Plain values across the sandbox boundary"  # the first line of every sandbox script
HANG = """
import sys
from t2g_core.critics.sandbox import SandboxLimits, run_cases
program = "def f(x):\\n    while True:\\n        try:\\n            pass\\n        except BaseException:\\n            pass\\n"
print("started", flush=True)
run_cases(program, [{"code": "def check(candidate):\\n    assert candidate(1) == 2\\n"}], "f",
          SandboxLimits(timeout_s=60, isolation=sys.argv[1]))
"""


def _sandboxes(processes) -> set[int]:
    """The pids of the living sandbox interpreters among ``processes`` (psutil processes)."""
    found = set()
    for proc in processes:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and any(MARK in arg for arg in proc.cmdline()):
                found.add(proc.pid)
        except psutil.Error:  # gone meanwhile
            continue
    return found


@pytest.mark.parametrize("backend", [b for b in ("bwrap", "unshare") if isolation.works(b)])
def test_sandbox_processes_die_with_a_killed_parent(backend):
    """The sandbox processes this parent started, found by their ancestry before it is killed: another test's sandbox
    starting meanwhile (the other test worker runs code critics too) once made this test fail."""
    parent = subprocess.Popen([sys.executable, "-c", HANG, backend], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "started"

        def started() -> set[int]:
            return _sandboxes(psutil.Process(parent.pid).children(recursive=True))

        deadline = time.monotonic() + 30
        while len(started()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        ours = [psutil.Process(pid) for pid in started()]
        assert len(ours) >= 2, "the judge and the candidate never started"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _sandboxes(ours) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _sandboxes(ours), "sandbox processes outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
