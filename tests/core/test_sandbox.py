"""The code sandbox: hostile programs are stopped or refused and reported; the parent is unharmed."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from t2g_core.critics.sandbox import SandboxLimits, namespaces_available, run_cases

FAST = SandboxLimits(timeout_s=1.0, memory_mb=256, max_procs=8)
OS_ONLY = SandboxLimits(timeout_s=1.0, memory_mb=256, max_procs=8, audit_guard=False)
PROGRAM = "def f(x):\n    return x + 1\n"


def case(body: str, header: str = "") -> dict[str, str]:
    lines = "\n".join("    " + line for line in body.strip().splitlines())
    return {"code": f"{header}\ndef check(candidate):\n{lines}\n"}


def _sandbox_processes(uids: list[int], wait_s: float = 3.0) -> list[int]:
    """Live processes of these sandbox uids (after up to ``wait_s`` for the kernel to finish killing them)."""
    deadline = time.monotonic() + wait_s
    while (pids := _scan(set(uids))) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


def _scan(uids: set[int]) -> list[int]:
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = int(next(line for line in status.read_text().splitlines() if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        if uid in uids and "\nState:\tZ" not in status.read_text():
            pids.append(int(status.parent.name))
    return pids


def run(cases, limits=FAST):
    result = run_cases(PROGRAM, cases, "f", limits)
    assert result.error is None
    assert result.uids or os.geteuid() != 0
    assert len(result.results) == len(cases) and [r.index for r in result.results] == list(range(len(cases)))
    return result


def test_passing_and_failing_cases_with_expected_vs_actual():
    res = run([case("assert __t2g_eq(candidate(1), 2, True)"), case("assert __t2g_eq(candidate(1), 3, True)")])
    assert [r.outcome for r in res.results] == ["pass", "fail"]
    assert res.results[1].message == "got 2, expected 3"
    assert res.results[0].covered == (2,)  # the body line; def lines carry no signal


def test_infinite_loop_is_stopped_and_the_next_case_still_runs():
    start = time.monotonic()
    res = run([case("while True:\n    pass"), case("assert candidate(1) == 2")])
    assert [r.outcome for r in res.results] == ["timeout", "pass"]
    assert time.monotonic() - start < 8


def test_loop_that_swallows_the_timer_is_killed_from_outside():
    body = "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass"
    res = run([case(body), case("assert candidate(1) == 2")], SandboxLimits(timeout_s=1.0, startup_s=2.5))
    assert res.results[0].outcome == "killed" and "killed after" in res.results[0].message
    assert res.results[1].outcome == "pass"  # a fresh sandbox went on with the rest
    assert _sandbox_processes(res.uids) == []


@pytest.mark.parametrize("limits", [FAST, OS_ONLY], ids=["audit-hook", "os-limits-only"])
def test_fork_bomb_is_refused_or_capped(limits):
    if limits is OS_ONLY and os.geteuid() != 0:
        pytest.skip("RLIMIT_NPROC per throwaway uid needs root")
    res = run([case("while True:\n    os.fork()", header="import os"), case("assert candidate(1) == 2")], limits)
    first = res.results[0]
    assert first.outcome in ("error", "timeout", "killed")
    if limits is FAST:
        assert "os.fork is not allowed" in first.message
    assert res.results[1].outcome in ("pass", "error")  # the parent lives on; the sandbox ends with its namespace
    assert _sandbox_processes(res.uids) == []


def test_memory_hog_gets_a_memory_error():
    res = run([case("block = bytearray(2 ** 31)\nassert block is None"), case("assert candidate(1) == 2")])
    assert res.results[0].outcome == "error" and res.results[0].message.startswith("MemoryError")
    assert res.results[1].outcome == "pass"


@pytest.mark.parametrize("limits", [FAST, OS_ONLY], ids=["audit-hook", "os-limits-only"])
def test_no_network_connection_reaches_the_host(limits):
    if limits is OS_ONLY and not namespaces_available():
        pytest.skip("no network namespace here: the audit hook is the only network block")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(3)
    port = listener.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(_accept(listener)), daemon=True).start()
    body = f"s = socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', {port}))\nassert candidate(1) == 2"
    res = run([case(body, header="import socket")], limits)
    listener.close()
    assert res.results[0].outcome == "error"
    assert (
        ("socket.connect is not allowed" in res.results[0].message)
        if limits is FAST
        else "Error" in res.results[0].message
    )
    assert accepted in ([], [None])


def _accept(listener):
    try:
        return listener.accept()[0]
    except OSError:
        return None


def test_environment_secrets_do_not_reach_the_sandbox(monkeypatch):
    monkeypatch.setenv("T2G_TEST_SECRET", "hunter2")
    res = run(
        [
            case("assert 'T2G_TEST_SECRET' not in os.environ, dict(os.environ)", header="import os"),
            case(f"assert 'hunter2' not in open('/proc/{os.getpid()}/environ').read()"),
        ]
    )
    assert res.results[0].outcome == "pass", res.results[0].message
    assert res.results[1].outcome == "error" and "PermissionError" in res.results[1].message


@pytest.mark.parametrize("limits", [FAST, OS_ONLY], ids=["audit-hook", "os-limits-only"])
def test_writes_outside_the_work_directory_are_refused(tmp_path, limits):
    if limits is OS_ONLY and os.geteuid() != 0:
        pytest.skip("the throwaway uid needs root")
    target = tmp_path / "parent-file.txt"
    target.write_text("untouched")
    res = run(
        [
            case(f"open({str(target)!r}, 'w').write('pwned')"),
            case("open('inside.txt', 'w').write('fine')\nassert open('inside.txt').read() == 'fine'"),
        ],
        limits,
    )
    assert res.results[0].outcome == "error" and "PermissionError" in res.results[0].message
    assert res.results[1].outcome == "pass"
    assert target.read_text() == "untouched"


def test_exiting_the_interpreter_is_reported_and_later_cases_run():
    res = run([case("os._exit(3)", header="import os"), case("raise SystemExit(0)"), case("assert candidate(1) == 2")])
    assert res.results[0].outcome == "killed" and "exit code 3" in res.results[0].message
    assert res.results[1].outcome == "error" and "SystemExit" in res.results[1].message
    assert res.results[2].outcome == "pass"


def test_syntax_error_in_the_program_is_reported_once():
    res = run_cases("def f(x):\n    return x +\n", [case("assert candidate(1) == 2")] * 3, "f", FAST)
    assert len(res.results) == 1 and res.results[0].outcome == "syntax_error" and res.results[0].line == 2
