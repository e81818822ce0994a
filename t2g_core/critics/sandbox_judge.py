"""The judge side of the sandbox: runs the trusted tests, calling the candidate only through data.

Started inside the isolation layer as ``python -I -c <plain.py + this file>``. Per case it runs the trusted prelude
and test code in a fresh namespace, then ``check(candidate)`` with a proxy: arguments leave as plain values, the
candidate process computes the call, and plain data (or a failure) is rebuilt here, so every comparison and verdict
happens where untrusted code never runs. Protocol (JSON lines): in: the job (``prelude``, ``cases``), then one reply
per call; out: ``{"case_start": i}``, ``{"call", "args", "kwargs"}`` and ``{"case": i, "outcome", "message"}``.
"""

import builtins
import json
import os
import sys


class CandidateFailure(Exception):
    """The candidate's call failed (error, timeout, crash); raised inside ``check``."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


class ArgumentNotPlain(Exception):
    """The test passed something that cannot cross to the candidate (not the candidate's fault)."""


def _short(value, n=120):
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def _eq(left, right, left_is_actual):
    """``assert a == b`` rewritten so a failure says what came out and what was expected."""
    if left == right:
        return True
    actual, expected = (left, right) if left_is_actual else (right, left)
    raise AssertionError(f"got {_short(actual)}, expected {_short(expected)}")


class Channel:
    """Private copies of stdin/stdout: what the tests print goes to /dev/null, not into the protocol."""

    def __init__(self):
        self.inp = os.fdopen(os.dup(0), "r", encoding="utf-8")
        self.out = os.fdopen(os.dup(1), "w", encoding="utf-8")
        sys.stdin, sys.stdout = open(os.devnull), open(os.devnull, "w")  # noqa: SIM115 - for the process's life

    def send(self, message):
        self.out.write(json.dumps(message) + "\n")
        self.out.flush()

    def receive(self):
        line = self.inp.readline()
        if not line:
            raise SystemExit(0)  # the parent went away
        return json.loads(line)


RAISABLE = (
    ArithmeticError,
    AssertionError,
    AttributeError,
    EOFError,
    ImportError,
    LookupError,
    NameError,
    OSError,
    RecursionError,
    RuntimeError,
    StopIteration,
    TypeError,
    ValueError,
    NotImplementedError,
)


def _exception(reply):
    """What the call raised, rebuilt here: a builtin exception of the same type (a test may expect one), else a
    CandidateFailure. Only a name and a message cross, never an object."""
    message = reply.get("error") or "the candidate failed"
    kind = getattr(builtins, str(reply.get("type")), None)
    if reply.get("kind") == "error" and isinstance(kind, type) and issubclass(kind, RAISABLE):
        exc = kind(message.split(": ", 1)[-1])
        exc.t2g_candidate = message
        return exc
    return CandidateFailure(reply.get("kind", "error"), message)


def proxy(channel, max_bytes):
    def candidate(*args, **kwargs):
        try:
            payload = {"call": True, "args": encode(list(args), max_bytes), "kwargs": encode(kwargs, max_bytes)}  # noqa: F821
        except NotPlain as exc:  # noqa: F821 - plain.py is prepended to this file
            raise ArgumentNotPlain(f"the test's arguments cannot be sent to the candidate: {exc}") from None
        channel.send(payload)
        reply = channel.receive()
        if "value" in reply:
            return decode(reply["value"])  # noqa: F821
        raise _exception(reply)

    return candidate


def run_case(channel, job, index, code):
    ns = {"__name__": "__t2g_tests__", "__t2g_eq": _eq}
    try:
        exec(job.get("prelude") or "", ns)
    except Exception:  # noqa: BLE001 - a prompt that is only a stub still defines its helpers up to the stub
        pass
    candidate = proxy(channel, job["max_bytes"])
    if job.get("entry_point"):
        ns[job["entry_point"]] = candidate  # tests that name the function itself (not `candidate`) call it too
    try:
        exec(compile(code, "<test>", "exec"), ns)
        if "check" not in ns:
            return {"outcome": "judge_error", "message": "the tests define no check(candidate)"}
        ns["check"](candidate)
    except CandidateFailure as exc:
        return {"outcome": exc.kind, "message": str(exc)}
    except ArgumentNotPlain as exc:
        return {"outcome": "judge_error", "message": str(exc)}
    except AssertionError as exc:
        return {"outcome": "fail", "message": str(exc) or None}
    except Exception as exc:  # noqa: BLE001 - the candidate raised, or the test raised on what it returned
        return {
            "outcome": "error",
            "message": getattr(exc, "t2g_candidate", None) or f"{type(exc).__name__}: {str(exc)[:200]}",
        }
    return {"outcome": "pass", "message": None}


def main():
    channel = Channel()
    job = channel.receive()
    sys.setrecursionlimit(3000)
    for round_ in range(job.get("rounds", 1)):  # one round of every case per program variant
        for index, code in enumerate(job["cases"]):
            channel.send({"case_start": index, "round": round_})
            channel.send({"case": index, "round": round_, **run_case(channel, job, index, code)})


if __name__ == "__main__":
    main()
