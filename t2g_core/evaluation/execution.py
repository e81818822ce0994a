"""Run one HumanEval-format sample (prompt + completion, then ``check(entry_point)``) in the annotation stage's sandbox.

The program is :func:`t2g_core.critics.code.build_program`'s, run by :func:`t2g_core.critics.sandbox.run_cases` with
the whole test module as one case: it passes only when every assertion holds. Timeouts and crashes are failures (as
in HumanEval); a sandbox that could not start is ``sandbox_error``.
"""

from __future__ import annotations

from dataclasses import dataclass

OUTCOMES = ("passed", "failed", "error", "timeout", "sandbox_error")
_FROM_CASE = {
    "pass": "passed",
    "fail": "failed",
    "error": "error",
    "syntax_error": "error",
    "timeout": "timeout",
    "killed": "timeout",
    "judge_error": "sandbox_error",
    "sandbox_error": "sandbox_error",
}


@dataclass(frozen=True)
class TestOutcome:
    """One sample's run: ``status`` is one of OUTCOMES; ``error`` says why it did not pass."""

    __test__ = False  # not a pytest class

    passed: bool
    status: str
    error: str | None = None


def run_humaneval(
    prompt: str, completion: str, tests: str, entry_point: str, *, timeout_s: float = 10.0
) -> TestOutcome:
    """Run ``completion`` for ``prompt`` against ``tests`` (a module defining ``check(candidate)``)."""
    from t2g_core.critics.code import build_program
    from t2g_core.critics.sandbox import SandboxLimits, run_cases

    program = build_program(prompt, completion, entry_point)
    run = run_cases(program.source, [{"code": tests}], entry_point, SandboxLimits(timeout_s=timeout_s), prelude=prompt)
    if run.error or not run.results:
        return TestOutcome(False, "sandbox_error", run.error or "the sandbox returned no result")
    case = run.results[0]
    status = _FROM_CASE.get(case.outcome, "error")
    if status == "sandbox_error":
        return TestOutcome(False, status, case.message)
    return TestOutcome(status == "passed", status, None if status == "passed" else (case.message or case.outcome))
