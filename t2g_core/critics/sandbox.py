"""Run untrusted code against test cases so that nothing the code does can forge a result.

Two sandboxed processes, each wrapped by an isolation backend (:mod:`t2g_core.critics.isolation`):

- the **candidate** (:mod:`t2g_core.critics.sandbox_candidate`) runs the untrusted program and answers calls to
  its entry point with plain data (:mod:`t2g_core.critics.plain`), never anything else;
- the **judge** (:mod:`t2g_core.critics.sandbox_judge`) runs the trusted tests; its ``candidate`` is a proxy whose
  calls this process relays to the candidate, so the comparisons, the entry point's resolution and each case's
  verdict happen in a process untrusted code never runs in, and only the judge's channel carries verdicts.

This parent relays calls with a deadline per call (the candidate's own timer reports the line that was running;
a loop that swallows it is killed here), restarts a candidate that died or hung for the next case, and blames every
failure the candidate causes on the candidate: an exception, a timeout, a crash, ``os._exit``, a missing entry point,
a value that is not plain data or too large. Outcomes: ``pass``, ``fail`` (an assertion did not hold), ``error``,
``timeout``, ``killed``, ``syntax_error`` (all of them the candidate's), and ``judge_error`` (the tests could not run:
not the candidate's fault). Limits (rlimits) apply to both processes; both die with this one.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t2g_core.critics.isolation import Isolation, IsolationUnavailable, resolve

HERE = Path(__file__).parent
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
    "base64",
)
CANDIDATE_FAULTS = ("fail", "error", "timeout", "killed", "syntax_error")
MAX_LINE = 4 << 20  # a reply line longer than this is the candidate flooding the channel
_UIDS = itertools.count()
UID_BASE, UID_SPAN = 61000, 2000
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 5.0  # per call of the candidate (wall clock)
    memory_mb: int = 512  # address space
    max_procs: int = 16
    max_file_mb: int = 16
    startup_s: float = 5.0  # allowance for interpreter start-up on a loaded machine
    max_value_kb: int = 1024  # a returned value larger than this (as plain data) is a failure
    isolation: str = "auto"  # auto | bwrap | unshare | none (see t2g_core.critics.isolation)
    audit_guard: bool = True  # the in-process layer; tests turn it off to show the OS layers hold on their own


@dataclass(frozen=True)
class CaseResult:
    index: int
    outcome: str  # pass | fail | error | timeout | killed | syntax_error | judge_error
    message: str | None
    line: int | None  # program line that raised (or was running at timeout), if in the program
    covered: tuple[int, ...] = ()
    at_import: bool = False  # the program failed while it was loaded, before the test could call it


@dataclass
class SandboxRun:
    results: list[CaseResult] = field(default_factory=list)
    isolation: str = ""
    error: str | None = None  # the sandbox itself failed (not the code under test)
    uids: list[int] = field(default_factory=list)  # throwaway uids used (as root, unshare/none), for audits


@functools.cache
def _script(name: str) -> str:
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


class _Process:
    """One sandboxed interpreter speaking JSON lines on stdin/stdout."""

    def __init__(self, name: str, iso: Isolation, limits: SandboxLimits, job: dict[str, Any]):
        self.host_dir: str | None = None
        cmd, workdir = iso.wrap([iso.interpreter, "-I", "-B", "-c", _script(name)])
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
        self.buffer = b""
        self.send({**job, "workdir": workdir})

    def send(self, message: dict[str, Any]) -> bool:
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def receive(self, timeout_s: float) -> dict[str, Any] | str:
        """The next message, or ``"timeout"`` / ``"dead"`` / ``"garbled"``."""
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                if len(self.buffer) > MAX_LINE:
                    return "garbled"
                wait = deadline - time.monotonic()
                if wait <= 0:
                    return "timeout"
                if not sel.select(timeout=wait):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    return "dead"
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            return "garbled"
        return message if isinstance(message, dict) else "garbled"

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


class _Relay:
    """Runs the judge over every case (once per program variant), relaying its calls to a candidate process (started
    again after a crash, with the variant under test)."""

    def __init__(
        self, programs: list[str], entry_point: str | None, limits: SandboxLimits, iso: Isolation, run: SandboxRun
    ):
        self.limits, self.iso, self.run, self.programs = limits, iso, run, programs
        self.job = {
            "program": programs[0],
            "entry_point": entry_point,
            "timeout_s": limits.timeout_s,
            "max_bytes": limits.max_value_kb << 10,
            "preload": list(PRELOAD),
            "audit_guard": limits.audit_guard,
        }
        self.rounds: list[list[CaseResult]] = [[] for _ in programs]
        self.current = 0  # the variant the candidate runs
        self.candidate: _Process | None = None
        self.syntax_error: dict[str, Any] | None = None  # of the current variant
        self.fault: dict[str, Any] | None = None  # the candidate's failure in the case under way
        self.covered: set[int] = set()

    # -- the candidate --------------------------------------------------------------------------------------
    def _start_candidate(self) -> None:
        job = dict(self.job, program=self.programs[self.current])
        if os.geteuid() == 0 and self.iso.backend != "bwrap":  # bwrap drops every capability instead
            uid = UID_BASE + (os.getpid() * 31 + next(_UIDS)) % UID_SPAN
            job.update(uid=uid, gid=uid)
            self.run.uids.append(uid)
        self.candidate = _Process("candidate", self.iso, self.limits, job)
        self._loaded(self.candidate.receive(self.limits.startup_s + self.limits.timeout_s))

    def _loaded(self, hello: dict | str) -> None:
        self.syntax_error = None
        if isinstance(hello, dict) and "syntax_error" in hello:
            self.syntax_error = hello
        elif hello != {"ready": True}:
            self._drop_candidate("killed", f"the program did not start: {self._why(hello)}")

    def _switch(self, variant: int) -> None:
        """The candidate runs ``variant`` from now on (a fresh process is started lazily if it has none)."""
        self.current = variant
        if self.candidate is not None and self.candidate.send({"op": "load", "program": self.programs[variant]}):
            self._loaded(self.candidate.receive(self.limits.startup_s + self.limits.timeout_s))
        elif self.candidate is not None:
            self._drop_candidate("killed", "the program's process is gone")

    def _why(self, reply: dict | str) -> str:
        if reply == "garbled":
            return "it wrote to the result channel"
        if self.candidate is None:
            return "no process"
        return self.candidate.exit_text(wait_s=2.0 if reply == "dead" else 0.0)

    def _drop_candidate(self, kind: str, message: str, line: int | None = None) -> dict[str, Any]:
        if self.candidate is not None:
            self.candidate.kill()
            self.candidate = None
        self.fault = {"error": message, "kind": kind, "line": line}
        return self.fault

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """The candidate's reply to ``request``; a dead, hung or garbling candidate becomes this case's fault."""
        if self.candidate is None or not self.candidate.send(request):
            return self._drop_candidate("killed", "the program's process is gone")
        reply = self.candidate.receive(self.limits.timeout_s + 1.0)
        if reply == "timeout":
            return self._drop_candidate("timeout", f"timed out after {self.limits.timeout_s:g} s (killed)")
        if isinstance(reply, str):
            return self._drop_candidate("killed", f"the program failed: {self._why(reply)}")
        self.covered.update(int(n) for n in reply.get("covered", ()) if isinstance(n, int))
        if "error" in reply:
            self.fault = {
                "error": str(reply["error"])[:300],
                "kind": reply.get("kind", "error") if reply.get("kind") in ("error", "timeout") else "error",
                "line": reply.get("line") if isinstance(reply.get("line"), int) else None,
                "type": reply.get("type") if isinstance(reply.get("type"), str) else None,
            }
            return self.fault
        return {"value": reply.get("value")}

    # -- the judge's messages -------------------------------------------------------------------------------
    def case_start(self, variant: int) -> None:
        self.fault, self.covered = None, set()
        if variant != self.current:
            self._switch(variant)
        if self.candidate is None:
            self._start_candidate()
        if self.syntax_error is not None:
            self.fault = {
                "error": self.syntax_error["syntax_error"],
                "kind": "syntax_error",
                "line": self.syntax_error.get("line"),
            }
        elif self.candidate is not None and "error" in self._ask({"op": "reset"}):
            self.fault["at_import"] = True

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.fault is not None:
            return self.fault
        return self._ask({"op": "call", "args": message.get("args"), "kwargs": message.get("kwargs")})

    def verdict(self, message: dict[str, Any]) -> None:
        outcome, text = message.get("outcome"), message.get("message")
        fault = self.fault or {}
        if fault.get("kind") in ("timeout", "killed", "syntax_error"):  # whatever the test did with it
            outcome, text = fault["kind"], fault["error"]
        elif fault and outcome == "error":
            text = fault["error"]
        if outcome not in (*CANDIDATE_FAULTS, "pass", "judge_error"):
            outcome, text = "judge_error", f"unknown outcome {outcome!r}"
        result = CaseResult(
            int(message["case"]),
            outcome,
            text,
            fault.get("line"),
            tuple(sorted(self.covered)),
            bool(fault.get("at_import")),
        )
        self.rounds[self.current].append(result)

    def close(self) -> None:
        if self.candidate is not None:
            self.candidate.kill()


def _judge(relay: _Relay, judge: _Process, n_cases: int, budget_s: float | None) -> None:
    """Drive the judge to the end (or the time budget); every case of a variant that started gets a result."""
    patience = relay.limits.startup_s + 4 * relay.limits.timeout_s + 2.0
    stop = None if budget_s is None else time.monotonic() + budget_s
    while True:
        message = judge.receive(patience)
        if not isinstance(message, dict):
            results = relay.rounds[relay.current]
            done = {r.index for r in results}
            why = f"the tests stopped ({message})"
            results += [CaseResult(i, "judge_error", why, None) for i in range(n_cases) if i not in done]
            return
        if "case_start" in message:
            variant = int(message.get("round", 0))
            if variant != relay.current and stop is not None and time.monotonic() > stop:
                return  # out of time: the variants not reached have no results
            relay.case_start(variant)
        elif "call" in message:
            judge.send(relay.call(message))
        elif "case" in message:
            relay.verdict(message)
            if len(relay.rounds[-1]) == n_cases:
                return


def run_variants(
    programs: list[str],
    cases: list[dict[str, str]],
    entry_point: str | None,
    limits: SandboxLimits = SandboxLimits(),
    prelude: str = "",
    budget_s: float | None = None,
) -> tuple[list[list[CaseResult]], SandboxRun]:
    """Run each of ``programs`` against ``cases`` in one sandbox session (variants of one program, for fault
    localisation): per program, one result per case (empty for programs the ``budget_s`` did not reach)."""
    run = SandboxRun()
    if not cases or not programs:
        return [[] for _ in programs], run
    try:
        iso = resolve(limits.isolation)
    except (IsolationUnavailable, ValueError) as exc:
        run.error = str(exc)
        return [[] for _ in programs], run
    run.isolation = iso.backend
    relay = _Relay(programs, entry_point, limits, iso, run)
    judge = None
    try:
        job = {
            "prelude": prelude,
            "cases": [c["code"] for c in cases],
            "max_bytes": limits.max_value_kb << 10,
            "entry_point": entry_point,
            "rounds": len(programs),
        }
        judge = _Process("judge", iso, limits, job)
        _judge(relay, judge, len(cases), budget_s)
    except OSError as exc:
        run.error = f"could not start the sandbox: {exc}"
    finally:
        relay.close()
        if judge is not None:
            judge.kill()
    return [sorted(r, key=lambda c: c.index) for r in relay.rounds], run


def run_cases(
    program: str,
    cases: list[dict[str, str]],
    entry_point: str | None,
    limits: SandboxLimits = SandboxLimits(),
    prelude: str = "",
) -> SandboxRun:
    """Run ``program`` against ``cases`` (each ``{"code": test module source defining check(candidate)}``).

    ``prelude`` is trusted code the tests may use (the prompt's helpers); the candidate never sees the tests. A
    program that does not compile gets one ``syntax_error`` result.
    """
    [results], run = run_variants([program], cases, entry_point, limits, prelude)
    if results and all(r.outcome == "syntax_error" for r in results):
        results = [results[0]]
    run.results = results
    return run
