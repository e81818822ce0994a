"""One sandboxed interpreter speaking JSON lines on stdin/stdout: its limits, its clock and its end.

Limits are rlimits set between fork and exec and the isolation backend's sized scratch mounts. Every wait is timed on
the process's own time (:mod:`t2g_core.critics.process_time`), so a verdict does not depend on the machine's load;
wall time (``wall_factor`` times the limit) is only a safety net that reports the machine too loaded to judge.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from t2g_core.critics.isolation import SCRATCH_MB, Isolation
from t2g_core.critics.process_time import ProcessClock, Sample

HERE = Path(__file__).parent
MAX_LINE = 4 << 20  # a reply line longer than this is the candidate flooding the channel
PR_SET_PDEATHSIG = 1
POLL_S = 0.25  # how often a wait past its limit looks at the process's clock


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 5.0  # per call of the candidate, in its own time (CPU, or waiting for anything but a CPU)
    memory_mb: int = 512  # address space
    max_procs: int = 16
    max_file_mb: int = 16
    scratch_mb: int = SCRATCH_MB  # each writable tmpfs (/tmp, the work folder): scratch files are memory
    startup_s: float = 5.0  # allowance for interpreter start-up (own time, like timeout_s)
    wall_factor: float = 30.0  # a wait this many times its limit in wall time: the machine is too loaded to judge
    max_value_kb: int = 1024  # a returned value larger than this (as plain data) is a failure
    isolation: str = "auto"  # auto | bwrap | unshare | none (see t2g_core.critics.isolation)
    audit_guard: bool = True  # the in-process layer; tests turn it off to show the OS layers hold on their own


@dataclass(frozen=True)
class Overloaded:
    """A wait that reached the wall-clock safety net before the process used its limit of own time."""

    own_s: float
    wall_s: float

    def __str__(self) -> str:
        return (
            f"the machine was too loaded to judge: the process got {self.own_s:.1f} s of its own time in "
            f"{self.wall_s:.0f} s (lower the concurrency)"
        )


@functools.cache
def script(name: str) -> str:
    """A sandbox script's source with the plain-value codec in front (it runs with ``-I``: nothing is importable)."""
    return (
        (HERE / "plain.py").read_text(encoding="utf-8")
        + "\n"
        + (HERE / f"sandbox_{name}.py").read_text(encoding="utf-8")
    )


def _user_processes() -> int:
    uid = os.getuid()
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if f"\nUid:\t{uid}\t" in status.read_text():
                count += 1
        except OSError:
            continue
    return count


def _preexec(limits: SandboxLimits):
    cpu = int(limits.startup_s + 60 * limits.timeout_s) + 1
    mem, fsize = limits.memory_mb << 20, limits.max_file_mb << 20
    nproc = limits.max_procs + (0 if os.geteuid() == 0 else _user_processes())  # a normal user's limit is per uid
    libc = ctypes.CDLL(None, use_errno=True)

    def apply() -> None:  # in the child between fork and exec
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with us, even on kill -9
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


class SandboxProcess:
    """One sandboxed interpreter (``sandbox_<name>.py``) speaking JSON lines on stdin/stdout."""

    def __init__(self, name: str, iso: Isolation, limits: SandboxLimits, job: dict[str, Any]):
        self.host_dir: str | None = None
        self.wall_factor = limits.wall_factor
        cmd, workdir = iso.wrap([iso.interpreter, "-I", "-B", "-c", script(name)], limits.scratch_mb)
        if iso.needs_host_dir:
            self.host_dir = workdir = tempfile.mkdtemp(prefix="t2g-sandbox-")
            if job.get("uid") is not None:
                os.chown(workdir, job["uid"], job["gid"])
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir or "/"}
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self.host_dir,
            env=env,
            preexec_fn=_preexec(limits),
            start_new_session=True,
        )
        self.clock = ProcessClock(self.proc.pid, iso.interpreter)
        self.buffer = b""
        self.overloaded: Overloaded | None = None  # the last wait that hit the safety net
        self.used_s = 0.0  # own time spent in the waits so far (a session's time budget counts it, not wall time)
        self.send({**job, "workdir": workdir})

    def send(self, message: dict[str, Any]) -> bool:
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def receive(self, limit_s: float, from_start: bool = False) -> dict[str, Any] | str:
        """The next message, or ``"timeout"`` (the process used ``limit_s`` of its own time without answering),
        ``"overloaded"`` (``wall_factor * limit_s`` of wall time passed first: see :attr:`overloaded`), ``"dead"``
        or ``"garbled"``. ``from_start``: count the process's time since it started (its start-up)."""
        start = Sample(time.monotonic(), None, None) if from_start else self.clock.sample()
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                if len(self.buffer) > MAX_LINE:
                    return "garbled"
                wall = time.monotonic() - start.at
                if sel.select(timeout=max(limit_s - wall, POLL_S if wall >= limit_s else 0.0)):
                    chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                    if not chunk:
                        return "dead"
                    self.buffer += chunk
                elif time.monotonic() - start.at >= limit_s and (late := self._late(start, from_start, limit_s)):
                    return late
        self.used_s += self._own(start, from_start)[0]
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            return "garbled"
        return message if isinstance(message, dict) else "garbled"

    def _own(self, start: Sample, from_start: bool) -> tuple[float, float]:
        """``(own time, wall time)`` since ``start``. A start-up is timed from the interpreter's own start, on its CPU
        time alone: it runs none of the program (the candidate compiles it, the judge loads the tests), so what it
        waits for (the disk, or a wrapper whose set-up the machine starves) is the machine's time, not the program's."""
        if from_start:
            return self.clock.own_since(self.clock.birth() or start, waits_count=False)
        return self.clock.own_since(start)

    def _late(self, start: Sample, from_start: bool, limit_s: float) -> str | None:
        """``"timeout"`` or ``"overloaded"`` once the wait is over, else None (keep waiting)."""
        own, wall = self._own(start, from_start)
        net_s = self.wall_factor * limit_s
        self.used_s += own if own >= limit_s or wall >= net_s else 0.0
        if own >= limit_s:
            return "timeout"
        if wall >= net_s:
            self.overloaded = Overloaded(own, wall)
            return "overloaded"
        return None

    def exit_text(self, wait_s: float = 0.0) -> str:
        """How the process ended; ``wait_s``: how long to wait for a process whose output just closed to be reaped
        (under load the exit code arrives a moment after the pipe closes)."""
        try:
            code = self.proc.wait(timeout=wait_s) if wait_s > 0 else self.proc.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            return "it stopped answering"
        return f"its process died ({f'signal {signal.Signals(-code).name}' if code < 0 else f'exit code {code}'})"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if self.host_dir:
            shutil.rmtree(self.host_dir, ignore_errors=True)
