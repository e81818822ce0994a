"""The sandbox's bounds hold whatever the program and the machine do.

- Scratch space is memory (tmpfs is not counted by RLIMIT_AS): a program filling ``/tmp``, its work folder,
  ``/dev/shm`` or the root gets an error within the scratch size, never the host's memory. Before, bubblewrap's
  ``/tmp`` and work folder were unsized (one candidate took 2.35 GB in 5 s) and ``unshare`` left the host's
  ``/dev/shm`` writable.
- Verdicts do not depend on load: calls are timed on the candidate's own time (CPU, or waiting for anything but a
  CPU), so correct CPU-bound code at a concurrency far above the cores passes while an infinite loop and a program
  that sleeps still time out; a call starved past the wall-clock safety net is a ``sandbox_error`` (the machine was
  too loaded), not the candidate's ``timeout``. Before, 50 correct solutions at concurrency 50 all "timed out".
- Sandboxes running at once are capped by the cores this process may use, with a log line.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from t2g_core.critics import isolation
from t2g_core.critics.sandbox import SandboxLimits, run_cases, sandbox_workers

# one worker runs the sandbox tests one after another: many sandboxes starting at once on both workers (the
# concurrency test) contend in the kernel's namespace set-up and stretch every other sandbox's start-up
pytestmark = pytest.mark.xdist_group("sandbox")

BACKENDS = [b for b in ("bwrap", "unshare") if isolation.works(b)]
ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
FILL = (
    "import os\n"
    "def f(where, tag):\n"
    "    total = 0\n"
    "    try:\n"
    "        for i in range(48):\n"  # up to 384 MB, in 8 MB files (each under the file-size limit)
    "            with open(os.path.join(where, f't2g-fill-{tag}-{i}'), 'wb') as fh:\n"
    "                fh.write(b'x' * (8 << 20))\n"
    "            total += 8\n"
    "    except OSError as exc:\n"
    "        return [total, exc.errno]\n"
    "    return [total, 0]\n"
)
SQUARES = "def f(n):\n    total = 0\n    for i in range(n):\n        total += i * i\n    return total\n"
N = 600_000  # about 0.4 s of CPU time per call, with the sandbox's line coverage on


def _case(body: str) -> dict[str, str]:
    return {"code": f"def check(candidate):\n    {body}\n"}


@pytest.mark.skipif(not BACKENDS, reason="no isolation backend here")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("where", ["/tmp", ".", "/dev/shm", "/"])
def test_a_program_filling_its_scratch_space_gets_an_error_not_host_memory(backend, where):
    limits = SandboxLimits(timeout_s=10.0, memory_mb=256, isolation=backend, audit_guard=False)  # the OS layer alone
    tag = uuid.uuid4().hex  # files of an earlier run (another uid's) must not stop this one
    run = run_cases(FILL, [_case(f"assert __t2g_eq(candidate({where!r}, {tag!r}), 'shown', True)")], "f", limits)
    result = run.results[0]
    assert result.outcome == "fail", result
    written, errno = eval(result.message.removeprefix("got ").split(", expected")[0])  # noqa: S307 - our own list
    leaked = list(Path("/dev/shm").glob(f"t2g-fill-{tag}-*")) if Path("/dev/shm").is_dir() else []
    for path in leaked:  # the host's shared memory is not the sandbox's
        path.unlink()
    assert errno != 0 and written <= limits.scratch_mb, (where, written, errno, os.strerror(errno) if errno else "")
    assert not leaked


@pytest.mark.slow  # 24 sandboxes at once: 10–20 s
@pytest.mark.skipif(not BACKENDS, reason="no isolation backend here")
@pytest.mark.parametrize("backend", BACKENDS)
def test_correct_cpu_bound_code_passes_at_a_concurrency_far_above_the_cores(backend):
    """24 sandboxes at once on this machine's cores: each call takes many times its CPU time in wall time."""
    limits = SandboxLimits(timeout_s=1.5, memory_mb=256, isolation=backend)
    correct = (SQUARES, [_case(f"assert candidate({N}) == {sum(i * i for i in range(N))}")])
    looping = ("def f(n):\n    while True:\n        n += 1\n", [_case("assert candidate(1) == 2")])
    jobs = [correct] * 22 + [looping] * 2
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        runs = list(pool.map(lambda job: run_cases(job[0], job[1], "f", limits), jobs))
    outcomes = [run.results[0].outcome for run in runs]
    assert outcomes == ["pass"] * 22 + ["timeout"] * 2, [(r.results[0].outcome, r.results[0].message) for r in runs]
    assert all(run.results[0].line in (2, 3) for run in runs[22:])  # the candidate's own CPU timer named the loop


@pytest.mark.skipif(not BACKENDS, reason="no isolation backend here")
def test_a_program_that_sleeps_still_times_out():
    sleeper = "import time\ndef f(n):\n    time.sleep(60)\n    return n\n"
    limits = SandboxLimits(timeout_s=1.0, memory_mb=256, isolation=BACKENDS[0])
    run = run_cases(sleeper, [_case("assert candidate(1) == 1")], "f", limits)
    assert run.results[0].outcome == "timeout", run.results[0]  # sleeping spends the program's own time


STARVED = r"""
import json, os, subprocess, sys
from t2g_core.critics import sandbox_process
from t2g_core.critics.sandbox import SandboxLimits, run_cases
core = min(os.sched_getaffinity(0))
hog = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
hogs = [subprocess.Popen([sys.executable, "-c", hog], start_new_session=True) for _ in range(24)]  # 24 autogroups
limits_of = sandbox_process._preexec

def starved(limits):  # the sandboxes share the hogs' core and run only when the hogs let them; this process does not
    apply = limits_of(limits)
    def both():
        apply()
        os.sched_setaffinity(0, {core})
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    return both

sandbox_process._preexec = starved
kill = sandbox_process.SandboxProcess.kill

def kill_after_the_hogs(self):  # the verdict is in: a starved process needs a CPU to die (about 15 s among the hogs)
    for hog in hogs:
        hog.kill()
    kill(self)

sandbox_process.SandboxProcess.kill = kill_after_the_hogs
try:
    # a start-up allowance of 1 s: the judge's patience grows with it (t2g_core.critics.sandbox._judge), and every
    # second of it is spent with 24 hogs spinning on one core
    limits = SandboxLimits(timeout_s=1.0, startup_s=1.0, memory_mb=256, wall_factor=1.0, isolation=sys.argv[1])
    program = "def f(n):\n    return sum(range(n))\n"
    test = "def check(candidate):\n    assert candidate(10**7) == 49999995000000\n"
    run = run_cases(program, [{"code": test}], "f", limits)
    print(json.dumps([[r.outcome, r.message] for r in run.results]))
finally:
    for hog in hogs:
        hog.kill()
"""


@pytest.mark.skipif(not BACKENDS, reason="no isolation backend here")
def test_a_call_starved_past_the_safety_net_is_a_sandbox_problem_not_a_timeout():
    done = subprocess.run(
        [sys.executable, "-c", STARVED, BACKENDS[0]], capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [[outcome, message]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == "sandbox_error" and "too loaded to judge" in message, (outcome, message)


class _SlowWrapper(isolation.Isolation):
    """A wrapper process (named like one) that waits 2 s before it starts the interpreter, as bubblewrap's child
    waits for its parent's set-up when the machine starves that parent."""

    def wrap(self, argv, scratch_mb=isolation.SCRATCH_MB):
        wrapper = Path(self.hidden[0]) / "unshare"
        wrapper.write_text('#!/bin/sh\nsleep 2\n"$@"\n')
        wrapper.chmod(0o755)
        return [str(wrapper), *argv], ""


def test_a_start_up_waiting_on_its_wrapper_is_not_the_programs_time(tmp_path):
    """Start-up runs none of the program (it is only compiled), so its waits are the machine's: a wrapper's slow
    set-up once made a correct program 'killed: the program did not start' on a loaded machine (CI)."""
    from t2g_core.critics.sandbox_process import SandboxProcess

    limits = SandboxLimits(timeout_s=0.5, startup_s=0.5)
    job = {"program": "def f(n):\n    return n\n", "entry_point": "f", "timeout_s": 0.5, "max_bytes": 1024}
    process = SandboxProcess("candidate", _SlowWrapper("none", hidden=(str(tmp_path),)), limits, job)
    try:
        assert process.receive(1.0, from_start=True) == {"ready": True}  # after 2 s of wall time, 1 s allowed
    finally:
        process.kill()


def test_sandbox_concurrency_is_capped_by_the_cores_with_a_log_line(caplog):
    cores = len(os.sched_getaffinity(0))
    with caplog.at_level(logging.WARNING):
        assert sandbox_workers(cores) == cores and not caplog.records
        assert sandbox_workers(cores + 22) == cores
    assert f"lowered from {cores + 22} to {cores}" in caplog.text


@pytest.mark.skipif(not BACKENDS, reason="no isolation backend here")
def test_the_code_annotator_runs_at_most_one_sandbox_per_core():
    from t2g_core.annotators import make_annotator
    from t2g_core.config.annotate import AnnotateConfig

    annotator = make_annotator(AnnotateConfig(annotator="code", concurrency=50), None, None)
    assert annotator.workers == len(os.sched_getaffinity(0))


def test_own_time_counts_sleeping_but_not_waiting_for_a_cpu():
    """The clock behind the verdicts, on real processes: a sleeper spends its own time; a busy process on a core
    it shares with eight others gets a ninth of the wall time as its own."""
    from t2g_core.critics.process_time import ProcessClock

    core = min(os.sched_getaffinity(0))
    busy = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", busy], start_new_session=True) for _ in range(9)]
    procs.append(subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(60)"]))
    try:
        time.sleep(0.5)
        clocks = [ProcessClock(p.pid, sys.executable) for p in (procs[0], procs[-1])]
        starts = [c.sample() for c in clocks]
        time.sleep(2.0)
        (busy_own, busy_wall), (sleep_own, sleep_wall) = (c.own_since(s) for c, s in zip(clocks, starts, strict=True))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert sleep_own == pytest.approx(sleep_wall, abs=0.1)
    assert busy_own < 0.5 * busy_wall, (busy_own, busy_wall)
