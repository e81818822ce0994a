"""The code sandbox: a judge process runs the tests, the candidate process only answers calls with plain data.

Behaviour under each isolation backend this machine has (bwrap, unshare): verdicts with expected vs actual, timeouts
(even swallowed ones), crashes and exits blamed on the candidate, memory and process limits, syntax errors, plain
values only, exceptions a test expects. The hostile cases (reward hacks, escapes, a normal user) are in
``tests/adversarial``.
"""

from __future__ import annotations

import time

import pytest

from t2g_core.critics import isolation
from t2g_core.critics.plain import NotPlain, decode, encode
from t2g_core.critics.sandbox import SandboxLimits, run_cases

# one worker runs the sandbox tests one after another: many sandboxes starting at once on both workers (the
# concurrency test) contend in the kernel's namespace set-up and stretch every other sandbox's start-up
pytestmark = pytest.mark.xdist_group("sandbox")

BACKENDS = [b for b in ("bwrap", "unshare") if isolation.works(b)]
PROGRAM = "def f(x):\n    return x + 1\n"


def case(body: str, header: str = "") -> dict[str, str]:
    lines = "\n".join("    " + line for line in body.strip().splitlines())
    return {"code": f"{header}\ndef check(candidate):\n{lines}\n"}


@pytest.fixture(params=BACKENDS)
def limits(request):
    # 2.5 s: room for the interpreter's start-up while the other test worker loads the machine
    return SandboxLimits(timeout_s=2.5, memory_mb=256, max_procs=8, isolation=request.param)


def run(cases, limits, program=PROGRAM):
    result = run_cases(program, cases, "f", limits)
    assert result.error is None and result.isolation == limits.isolation
    assert [r.index for r in result.results] == list(range(len(cases)))
    return result


def test_this_machine_has_an_isolation_backend():
    assert BACKENDS, "install bubblewrap (make test installs it) or allow user namespaces"


def test_passing_and_failing_cases_with_expected_vs_actual(limits):
    res = run([case("assert __t2g_eq(candidate(1), 2, True)"), case("assert __t2g_eq(candidate(1), 3, True)")], limits)
    assert [r.outcome for r in res.results] == ["pass", "fail"]
    assert res.results[1].message == "got 2, expected 3"
    assert res.results[0].covered == (2,)  # the body line; def lines carry no signal


def test_an_infinite_loop_times_out_and_the_next_case_still_runs(limits):
    start = time.monotonic()
    program = "def f(x):\n    while x == 0:\n        pass\n    return x + 1\n"
    res = run([case("assert candidate(0) == 1"), case("assert candidate(1) == 2")], limits, program)
    assert [r.outcome for r in res.results] == ["timeout", "pass"] and res.results[0].line in (2, 3)  # in the loop
    assert time.monotonic() - start < 8


def test_a_loop_that_swallows_the_timer_is_killed_from_outside(limits):
    program = (
        "def f(x):\n    while x == 0:\n        try:\n            while True:\n                pass\n"
        "        except BaseException:\n            pass\n    return x + 1\n"
    )
    res = run([case("assert candidate(0) == 1"), case("assert candidate(1) == 2")], limits, program)
    assert res.results[0].outcome == "timeout" and "killed" in res.results[0].message
    assert res.results[1].outcome == "pass"  # a fresh candidate process went on


def test_a_bare_except_in_the_tests_cannot_turn_a_hang_into_a_pass(limits):
    program = (
        "def f(x):\n    while True:\n        try:\n            pass\n        except BaseException:\n            pass\n"
    )
    res = run([case("try:\n    candidate(1)\nexcept BaseException:\n    pass")], limits, program)
    assert res.results[0].outcome == "timeout"


def test_exits_and_crashes_are_the_candidates_failure(limits):
    program = (
        "import os\ndef f(x):\n    if x == 0:\n        os._exit(3)\n    if x == 1:\n        raise SystemExit(0)\n"
        "    return x + 1\n"
    )
    res = run(
        [case("assert candidate(0) == 1"), case("assert candidate(1) == 2"), case("assert candidate(2) == 3")],
        limits,
        program,
    )
    assert res.results[0].outcome == "killed" and "exit code 3" in res.results[0].message
    assert res.results[1].outcome == "error" and "SystemExit" in res.results[1].message
    assert res.results[2].outcome == "pass"


def test_memory_hog_gets_a_memory_error(limits):
    program = "def f(x):\n    block = bytearray(2 ** 31)\n    return x\n"
    res = run([case("assert candidate(1) == 1")], limits, program)
    assert res.results[0].outcome == "error" and res.results[0].message.startswith("MemoryError")


def test_fork_bomb_is_refused_and_capped(limits):
    program = "import os\ndef f(x):\n    while True:\n        os.fork()\n"
    res = run([case("assert candidate(1) == 2"), case("assert candidate(1) == 2")], limits, program)
    assert [r.outcome for r in res.results] == ["error", "error"] and "os.fork is not allowed" in res.results[0].message
    bare = SandboxLimits(timeout_s=1.0, memory_mb=256, max_procs=8, isolation=limits.isolation, audit_guard=False)
    res = run([case("assert candidate(1) == 2")], bare, program)  # the OS layer alone: rlimits and the namespace
    assert res.results[0].outcome in ("error", "timeout", "killed")


def test_syntax_error_in_the_program_is_reported_once(limits):
    res = run_cases("def f(x):\n    return x +\n", [case("assert candidate(1) == 2")] * 3, "f", limits)
    assert len(res.results) == 1 and res.results[0].outcome == "syntax_error" and res.results[0].line == 2


def test_a_missing_entry_point_fails_every_case(limits):
    res = run([case("assert candidate(1) == 2")], limits, "def g(x):\n    return x + 1\n")
    assert res.results[0].outcome == "error" and "defines no function 'f'" in res.results[0].message


def test_tests_may_expect_a_builtin_exception(limits):
    program = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
    body = "try:\n    candidate(-1)\n    assert False, 'no error'\nexcept ValueError:\n    pass"
    res = run([case(body), case("assert candidate(2) == 2")], limits, program)
    assert [r.outcome for r in res.results] == ["pass", "pass"]


def test_the_prompt_prelude_serves_the_tests(limits):
    prelude = "def helper(s):\n    return s[::-1]\n"
    res = run_cases(
        "def f(s):\n    return s[::-1]\n",
        [case("assert candidate(helper('ab')) == 'ab'")],
        "f",
        limits,
        prelude=prelude,
    )
    assert res.results[0].outcome == "pass"


def test_only_plain_values_cross_and_they_come_back_whole():
    value = [1, 2.5, float("inf"), "s", b"b", (1, (2,)), {3, 4}, frozenset({5}), {1: [None, True]}, 1 + 2j, 10**40]
    back = decode(encode(value, 10_000))
    assert back == value and type(back[5]) is tuple and type(back[6]) is set
    for bad in (object(), type("I", (int,), {})(3), [1] * 10_000, eval("[" * 70 + "]" * 70)):  # noqa: S307
        with pytest.raises(NotPlain):
            encode(bad, 10_000)


def test_no_isolation_is_refused_unless_asked_for(monkeypatch):
    isolation.works.cache_clear()
    monkeypatch.setattr(isolation.shutil, "which", lambda name: None)
    try:
        res = run_cases(PROGRAM, [case("assert candidate(1) == 2")], "f", SandboxLimits())
        assert res.results == [] and "no sandbox isolation works here" in res.error
        isolation._warn_unisolated.cache_clear()
        with pytest.warns(isolation.UnsafeSandboxWarning, match="without OS isolation"):
            res = run_cases(PROGRAM, [case("assert candidate(1) == 2")], "f", SandboxLimits(isolation="none"))
        assert res.isolation == "none" and res.results[0].outcome == "pass"
    finally:
        isolation.works.cache_clear()
