"""Run a HumanEval-format program (prompt + completion + check function) in a separate, isolated process.

The annotation stage owns the sandbox (``t2g_core.critics``); when its runner is importable it is used, otherwise
this module's subprocess runner: ``python -I`` in a fresh temporary folder, a wall-clock timeout, CPU-time and
memory limits, no inherited environment. It is isolation against accidents, not against hostile code.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

OUTCOMES = ("passed", "failed", "timeout", "error")


@dataclass(frozen=True)
class TestOutcome:
    """One program run: ``status`` is one of OUTCOMES; ``error`` holds the tail of stderr when it did not pass."""

    __test__ = False  # not a pytest class

    passed: bool
    status: str
    error: str | None = None


def humaneval_program(prompt: str, completion: str, tests: str, entry_point: str) -> str:
    """The program HumanEval runs: the prompt (signature + docstring), the completion, the tests, the check call."""
    return f"{prompt}{completion}\n\n{tests}\n\ncheck({entry_point})\n"


def _limits(memory_mb: int, cpu_s: int):
    def apply() -> None:  # runs in the child before exec
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))

    return apply


def run_program(program: str, timeout_s: float = 10.0, memory_mb: int = 1024) -> TestOutcome:
    """Run ``program`` with ``python -I`` in a temporary folder; passed = exit status 0 within the timeout."""
    with tempfile.TemporaryDirectory(prefix="t2g-eval-") as tmp:
        path = Path(tmp) / "program.py"
        path.write_text(program, encoding="utf-8")
        try:
            proc = subprocess.run(
                [sys.executable, "-I", str(path)], cwd=tmp, env={"PYTHONDONTWRITEBYTECODE": "1"},
                capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                preexec_fn=_limits(memory_mb, int(timeout_s) + 1),
            )
        except subprocess.TimeoutExpired:
            return TestOutcome(False, "timeout", f"no result within {timeout_s:g} s")
    if proc.returncode == 0:
        return TestOutcome(True, "passed")
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    status = "failed" if "AssertionError" in proc.stderr else "error"
    return TestOutcome(False, status, "\n".join(tail) or f"exit status {proc.returncode}")


def run_humaneval(prompt: str, completion: str, tests: str, entry_point: str, *, timeout_s: float = 10.0) -> TestOutcome:
    """Run one HumanEval-format sample against its tests."""
    return run_program(humaneval_program(prompt, completion, tests, entry_point), timeout_s=timeout_s)
