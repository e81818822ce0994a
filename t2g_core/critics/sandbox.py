"""Run untrusted code against test cases so that nothing the code does can forge a result.

Two sandboxed processes (docs/annotation.md, "Code critic"): the candidate (:mod:`.sandbox_candidate`) runs the
untrusted program and answers calls with plain data; the judge (:mod:`.sandbox_judge`) runs the trusted tests, so
verdicts happen where untrusted code never runs. This parent limits each call on the candidate's own time
(:mod:`.sandbox_process`), restarts a candidate that died or hung, and blames every failure it causes on it.
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from t2g_core.critics.isolation import Isolation, IsolationUnavailable, resolve
from t2g_core.critics.sandbox_process import SandboxLimits, SandboxProcess

__all__ = ["CaseResult", "SandboxLimits", "SandboxRun", "run_cases", "run_variants", "sandbox_workers"]

PRELOAD = tuple(
    (
        "math cmath re string collections collections.abc itertools functools operator heapq bisect hashlib typing "
        "copy random statistics fractions decimal numbers datetime json array textwrap unicodedata dataclasses enum "
        "encodings.idna traceback linecache tokenize ast inspect abc contextlib io struct time calendar _strptime "
        "base64"
    ).split()
)
CANDIDATE_FAULTS = ("fail", "error", "timeout", "killed", "syntax_error")
_UIDS = itertools.count()
UID_BASE, UID_SPAN = 61000, 2000
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaseResult:
    index: int
    outcome: str  # pass | fail | error | timeout | killed | syntax_error | judge_error | sandbox_error
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
        self.candidate: SandboxProcess | None = None
        self.syntax_error: dict[str, Any] | None = None  # of the current variant
        self.fault: dict[str, Any] | None = None  # the candidate's failure in the case under way
        self.covered: set[int] = set()
        self.spent_s = 0.0  # own time of the candidates already dropped

    def used_s(self) -> float:
        """Own time the candidate processes have spent in this session (for a time budget that load cannot eat)."""
        return self.spent_s + (self.candidate.used_s if self.candidate is not None else 0.0)

    # -- the candidate --------------------------------------------------------------------------------------
    def _start_candidate(self) -> None:
        job = dict(self.job, program=self.programs[self.current])
        if os.geteuid() == 0 and self.iso.backend != "bwrap":  # bwrap drops every capability instead
            uid = UID_BASE + (os.getpid() * 31 + next(_UIDS)) % UID_SPAN
            job.update(uid=uid, gid=uid)
            self.run.uids.append(uid)
        self.candidate = SandboxProcess("candidate", self.iso, self.limits, job)
        self._loaded(self.candidate.receive(self.limits.startup_s + self.limits.timeout_s, from_start=True))

    def _loaded(self, hello: dict | str) -> None:
        self.syntax_error = None
        if isinstance(hello, dict) and "syntax_error" in hello:
            self.syntax_error = hello
        elif hello == "overloaded":
            self._drop_candidate("sandbox_error", str(self.candidate.overloaded))
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
            self.spent_s += self.candidate.used_s
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
        if reply == "overloaded":
            return self._drop_candidate("sandbox_error", str(self.candidate.overloaded))
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
        if fault.get("kind") in ("timeout", "killed", "syntax_error", "sandbox_error"):  # whatever the test did
            outcome, text = fault["kind"], fault["error"]
        elif fault and outcome == "error":
            text = fault["error"]
        if outcome not in (*CANDIDATE_FAULTS, "pass", "judge_error", "sandbox_error"):
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


def _judge(relay: _Relay, judge: SandboxProcess, n_cases: int, budget_s: float | None) -> None:
    """Drive the judge to the end (or the time budget); every case of a variant that started gets a result."""
    # the judge's own start-up, then asleep (its own time) while the candidate starts and answers up to four calls
    patience = 2 * relay.limits.startup_s + 5 * relay.limits.timeout_s + 2.0
    first = True
    while True:
        message = judge.receive(patience, from_start=first)
        first = False
        if not isinstance(message, dict):
            results = relay.rounds[relay.current]
            done = {r.index for r in results}
            outcome, why = "judge_error", f"the tests stopped ({message})"
            if message == "overloaded":
                outcome, why = "sandbox_error", str(judge.overloaded)
            results += [CaseResult(i, outcome, why, None) for i in range(n_cases) if i not in done]
            return
        if "case_start" in message:
            variant = int(message.get("round", 0))
            if variant != relay.current and budget_s is not None and relay.used_s() + judge.used_s > budget_s:
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
        judge = SandboxProcess("judge", iso, limits, job)
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


def sandbox_workers(requested: int) -> int:
    """How many sandboxes to run at once: ``requested``, capped by the cores this process may use (each sandbox
    keeps one core busy; more only queue for CPU and waste memory), with a log line when it is lowered."""
    cores = len(os.sched_getaffinity(0))
    if requested > cores:
        log.warning(
            "sandbox concurrency lowered from %d to %d: this process may use %d cores (os.sched_getaffinity)",
            requested,
            cores,
            cores,
        )
    return max(1, min(requested, cores))
