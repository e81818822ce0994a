"""Run untrusted Python against test cases in a sandboxed subprocess; one JSON result per case.

Layers, outermost first (what is used is reported in :attr:`SandboxRun.isolation`):

- **namespaces** (root with ``unshare`` available): ``unshare --net --pid --fork --kill-child``: a fresh network
  namespace with no interface up (no network at all, loopback included) and a PID namespace, so killing the
  sandbox kills every process it started. Without root or ``unshare`` there is no network namespace; the audit
  hook's socket guard (below) is then the only network block.
- **a throwaway user**: as root, the harness drops to a per-sandbox uid/gid (no supplementary groups), so it
  cannot write the checkout or read root's files, and ``RLIMIT_NPROC`` counts only its own processes.
- **rlimits** set in ``preexec_fn``: CPU seconds, address space, process count, file size, open files, no core.
- **a temporary work directory** (owned by the sandbox uid, removed afterwards) as cwd and ``HOME``; a minimal
  environment (``PATH``, ``LANG``, ``HOME``): no secret of the parent's environment is passed on.
- **an audit hook** in the harness (:mod:`t2g_core.critics.sandbox_child`) refusing fork/exec/subprocess, ctypes,
  sockets, writes outside the work directory and ``/proc/*/environ``.
- **a new session**: on timeout the whole process group is killed (and with namespaces, the whole PID namespace).

Cases run one at a time with a per-case timer; if the process dies or hangs, the case in progress is reported as
``killed`` and a fresh sandbox continues with the remaining cases.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HARNESS = Path(__file__).with_name("sandbox_child.py")
PRELOAD = (
    "math",
    "cmath",
    "re",
    "string",
    "collections",
    "collections.abc",
    "itertools",
    "functools",
    "operator",
    "heapq",
    "bisect",
    "hashlib",
    "typing",
    "copy",
    "random",
    "statistics",
    "fractions",
    "decimal",
    "numbers",
    "datetime",
    "json",
    "array",
    "textwrap",
    "unicodedata",
    "dataclasses",
    "enum",
    "encodings.idna",
    "socket",
    "traceback",
    "linecache",
    "tokenize",
    "ast",
    "inspect",
    "abc",
    "contextlib",
    "io",
    "struct",
    "time",
    "calendar",
    "_strptime",
)
_UIDS = itertools.count()
UID_BASE, UID_SPAN = 61000, 2000


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 5.0  # per case (wall clock)
    memory_mb: int = 512  # address space
    max_procs: int = 16
    max_file_mb: int = 16
    startup_s: float = 5.0  # allowance for interpreter start-up on a loaded machine
    audit_guard: bool = True  # the in-process layer; tests turn it off to show the OS layers hold on their own


@dataclass(frozen=True)
class CaseResult:
    index: int
    outcome: str  # pass | fail | error | timeout | killed | syntax_error
    message: str | None
    line: int | None  # program line that raised (or was running at timeout), if in the program
    covered: tuple[int, ...] = ()


@dataclass
class SandboxRun:
    results: list[CaseResult] = field(default_factory=list)
    isolation: str = ""
    error: str | None = None  # the sandbox itself failed (not the code under test)
    uids: list[int] = field(default_factory=list)  # throwaway uids used (as root), for audits and tests


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """True when we are root and ``unshare --net --pid --fork`` works here."""
    exe = shutil.which("unshare")
    if os.geteuid() != 0 or exe is None:
        return False
    try:
        done = subprocess.run(
            [exe, "--net", "--pid", "--fork", "--kill-child", "true"], capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _preexec(limits: SandboxLimits, n_cases: int):
    cpu = int(n_cases * limits.timeout_s + limits.startup_s) + 1
    mem = limits.memory_mb * 1024 * 1024
    fsize = limits.max_file_mb * 1024 * 1024

    def apply() -> None:  # runs in the child between fork and exec: async-signal-safe calls only
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_procs, limits.max_procs))

    return apply


def _command() -> tuple[list[str], str]:
    python = [sys.executable, "-I", "-B", str(HARNESS)]
    if namespaces_available():
        return [
            shutil.which("unshare") or "unshare",
            "--net",
            "--pid",
            "--fork",
            "--kill-child",
            *python,
        ], "netns+pidns+uid"
    if os.geteuid() == 0:
        return python, "uid"
    return python, "same-user"


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _parse(stdout: bytes, nonce: str) -> list[CaseResult]:
    out = []
    for line in stdout.decode("utf-8", "replace").splitlines():
        if not line.startswith(nonce + " "):
            continue
        d = json.loads(line[len(nonce) + 1 :])
        out.append(CaseResult(d["index"], d["outcome"], d.get("message"), d.get("line"), tuple(d.get("covered", ()))))
    return out


def _read_results(proc: subprocess.Popen, job: dict[str, Any], limits: SandboxLimits) -> tuple[bytes, str | None]:
    """Collect stdout; the deadline restarts at each result line, so a hung case costs at most its own timeout."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    data, seen = b"", 0
    deadline = time.monotonic() + limits.startup_s + limits.timeout_s + 0.5
    try:
        while True:
            wait = deadline - time.monotonic()
            if wait <= 0:
                return data, f"killed after {limits.timeout_s:g} s (case did not finish)"
            if not sel.select(timeout=wait):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                return data, None
            data += chunk
            lines = data.count(b"\n")
            if lines > seen:
                seen, deadline = lines, time.monotonic() + limits.timeout_s + 0.5
    finally:
        sel.close()


def _one_process(
    job: dict[str, Any], limits: SandboxLimits, workdir: Path, uid: int
) -> tuple[list[CaseResult], str | None, str]:
    """Run the harness once; returns (results received, why it stopped early or None, isolation)."""
    cmd, isolation = _command()
    if os.geteuid() == 0:
        os.chown(workdir, uid, uid)
        job = dict(job, uid=uid, gid=uid)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(workdir)}
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=workdir,
            env=env,
            preexec_fn=_preexec(limits, len(job["cases"])),
            start_new_session=True,
        )
        try:
            proc.stdin.write(json.dumps(job).encode())
            proc.stdin.close()
            stdout, why = _read_results(proc, job, limits)
        except BrokenPipeError:
            stdout, why = b"", None
        finally:
            _kill(proc)  # the whole session (and with namespaces, the whole PID namespace)
            proc.wait()
            proc.stdout.close()
        err.seek(0)
        stderr = err.read()[-2000:]
    if why is None and proc.returncode != 0:
        sig = -proc.returncode if proc.returncode < 0 else None
        why = f"sandbox died ({f'signal {signal.Signals(sig).name}' if sig else f'exit code {proc.returncode}'})"
        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        if tail:
            why += f": {tail[0][:200]}"
    return _parse(stdout, job["nonce"]), why, isolation


def run_cases(
    program: str, cases: list[dict[str, str]], entry_point: str | None, limits: SandboxLimits = SandboxLimits()
) -> SandboxRun:
    """Run ``program`` against ``cases`` (each ``{"code": test module source defining check(candidate)}``)."""
    run = SandboxRun()
    base_job = {
        "program": program,
        "program_file": "<solution>",
        "entry_point": entry_point,
        "timeout_s": limits.timeout_s,
        "preload": list(PRELOAD),
        "audit_guard": limits.audit_guard,
        "nonce": secrets.token_hex(8),
    }
    start = 0
    while start < len(cases):
        workdir = Path(tempfile.mkdtemp(prefix="t2g-sandbox-"))
        try:
            job = dict(base_job, cases=cases[start:], first_index=start, workdir=str(workdir))
            uid = UID_BASE + (os.getpid() * 31 + next(_UIDS)) % UID_SPAN
            run.uids.append(uid)
            results, why, run.isolation = _one_process(job, limits, workdir, uid)
        except OSError as exc:
            run.error = f"could not start the sandbox: {exc}"
            return run
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        run.results.extend(results)
        if results and results[-1].outcome == "syntax_error":
            return run
        start += len(results)
        if start < len(cases):  # the process stopped early: blame the case in progress, go on with a fresh one
            if why is None:
                why = "sandbox stopped without reporting"
            run.results.append(CaseResult(start, "killed", why, None, ()))
            start += 1
    return run
