"""The candidate side of the sandbox: runs the untrusted program and answers calls to its entry point with data.

Started inside the isolation layer as ``python -I -c <plain.py + this file>``; it holds no test, expected value or
result channel. Protocol on a private copy of stdin/stdout (user code's stdin is /dev/null, its prints go to a
file), one JSON object per line: first the job (``program``, ``entry_point``, ``timeout_s``, ``max_bytes``,
``preload``, ``workdir``, ``uid``/``gid`` as root), answered ``{"ready": true}`` or ``{"syntax_error", "line"}``;
then ``{"op": "load", "program"}`` (a variant), ``{"op": "reset"}`` (a new case) and ``{"op": "call", "args",
"kwargs"}``: the entry point resolved *now* and called, answered ``{"value"}`` (plain data, size-capped) or
``{"error", "kind", "line"}``, with the lines it executed.

An audit hook (PEP 578: no process creation, ctypes, sockets or writes outside the work directory) is a second layer
behind the OS isolation, not the boundary: the boundary is that nothing here decides a result.
"""

import os
import signal
import sys

NEVER_ALLOWED = tuple(
    (
        "os.fork os.forkpty os.system os.exec os.posix_spawn os.spawn subprocess.Popen os.kill os.killpg pty.spawn "
        "ctypes.dlopen ctypes.dlsym ctypes.cdata os.setuid os.mkfifo os.mknod socket.connect socket.bind "
        "socket.sendto socket.sendmsg socket.getaddrinfo socket.gethostbyname"
    ).split()
)
WRITE_EVENTS = tuple(
    (
        "os.remove os.rename os.rmdir os.mkdir os.chmod os.chown os.symlink os.link os.truncate os.utime "
        "shutil.rmtree shutil.copyfile shutil.move"
    ).split()
)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
PROGRAM_FILE = "<solution>"


class CaseTimeout(BaseException):
    """The per-call timer, on CPU time (``ITIMER_PROF``: a busy machine does not make a call time out): a
    BaseException so ``except Exception`` in user code does not swallow it (a bare ``except:`` can, and a program
    that sleeps uses no CPU, which is why the parent also kills the process once its own time is up)."""


def _inside(path, root):
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return real == root or real.startswith(root + os.sep)


def _writes(mode, flags):
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and flags & WRITE_FLAGS != 0


def audit_hook(workdir):
    root = os.path.realpath(workdir)

    def hook(event, args):
        if event in NEVER_ALLOWED:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args and args[0] in ("ctypes", "_ctypes"):
            raise PermissionError("sandbox: ctypes is not allowed")
        if event == "open" and args and not isinstance(args[0], int) and args[0] is not None:
            path = os.fsdecode(args[0])
            if path.startswith("/proc/") or "/proc/" in path:
                raise PermissionError(f"sandbox: reading {path} is not allowed")
            if _writes(args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None) and (
                not os.path.isabs(path) or not _inside(path, root)
            ):  # relative paths may be dir_fd-relative
                raise PermissionError(f"sandbox: writing {path} is not allowed (only absolute paths in {root})")
        if event in WRITE_EVENTS and args and not isinstance(args[0], int) and not _inside(args[0], root):
            raise PermissionError(f"sandbox: {event} outside the work directory is not allowed")

    return hook


class Coverage:
    """Program lines executed inside functions (module-level lines run in every case and carry no signal)."""

    def __init__(self):
        self.lines = set()

    def _local(self, frame, event, arg):
        if event == "line":
            self.lines.add(frame.f_lineno)
        return self._local

    def global_trace(self, frame, event, arg):
        code = frame.f_code
        return self._local if code.co_filename == PROGRAM_FILE and code.co_name != "<module>" else None


def _program_line(tb):
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == PROGRAM_FILE:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _failure(exc, kind="error"):
    try:
        text = f"{type(exc).__name__}: {str(exc)[:200]}"
    except BaseException:  # noqa: BLE001 - a hostile __str__
        text = type(exc).__name__
    builtin = type(exc).__module__ == "builtins" and kind == "error"
    return {
        "error": text,
        "kind": kind,
        "line": _program_line(exc.__traceback__),
        "type": type(exc).__name__ if builtin else None,
    }


class Candidate:
    def __init__(self, job, code):
        self.job, self.code, self.ns = job, code, None

    def load(self, program):
        """Compile another program (a variant of the first, for fault localisation); ``ready`` or its syntax error."""
        self.ns = None
        try:
            self.code = compile(program, PROGRAM_FILE, "exec")
        except SyntaxError as exc:
            self.code = None
            return {"syntax_error": f"SyntaxError: {exc.msg}", "line": exc.lineno}
        return {"ready": True}

    def reset(self):
        if self.code is None:
            return {"error": "the program does not compile", "kind": "error", "line": None}
        self.ns = {"__name__": "__t2g_solution__"}
        return self._guarded(lambda: exec(self.code, self.ns) or {"ok": True})

    def call(self, request):
        entry = self.job.get("entry_point")
        func = self.ns.get(entry) if self.ns is not None and entry else None
        if not callable(func):
            return {"error": f"the program defines no function {entry!r} to test", "kind": "error", "line": None}
        args = decode(request["args"])  # noqa: F821 - plain.py is prepended to this file
        kwargs = decode(request["kwargs"])  # noqa: F821
        return self._guarded(lambda: {"value": encode(func(*args, **kwargs), self.job["max_bytes"])})  # noqa: F821

    def _guarded(self, work):
        cov = Coverage()
        try:
            signal.setitimer(signal.ITIMER_PROF, self.job["timeout_s"])
            sys.settrace(cov.global_trace)
            reply = work()
        except CaseTimeout as exc:
            reply = {**_failure(exc, "timeout"), "error": f"timed out after {self.job['timeout_s']:g} s"}
        except NotPlain as exc:  # noqa: F821
            reply = {"error": f"the function returned no plain value: {exc}", "kind": "error", "line": None}
        except BaseException as exc:  # noqa: BLE001 - SystemExit, MemoryError, RecursionError: all failures
            reply = _failure(exc)
        finally:
            sys.settrace(None)
            signal.setitimer(signal.ITIMER_PROF, 0)
        reply["covered"] = sorted(cov.lines)
        return reply


def _on_alarm(signum, frame):
    raise CaseTimeout("timed out")


def _private_channels(workdir):
    """Private copies of stdin/stdout for the protocol; user code gets /dev/null and a log file."""
    inp, out = os.dup(0), os.dup(1)
    os.set_inheritable(inp, False)
    os.set_inheritable(out, False)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    log = os.open(os.path.join(workdir, "stdout.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    return os.fdopen(inp, "r", encoding="utf-8"), out


def _send(fd, reply):
    import json

    data = (json.dumps(reply) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _drop_privileges(job):
    if job.get("uid") is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(job["gid"])
        os.setuid(job["uid"])


def main():
    import json

    job = json.loads(sys.stdin.readline())
    for name in job.get("preload", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module is just not preloaded
            pass
    os.chdir(job["workdir"])
    requests, out = _private_channels(job["workdir"])
    _drop_privileges(job)
    signal.signal(signal.SIGPROF, _on_alarm)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    sys.setrecursionlimit(3000)
    if job.get("audit_guard", True):
        sys.addaudithook(audit_hook(job["workdir"]))
    candidate = Candidate(job, None)
    _send(out, candidate.load(job["program"]))
    me = os.getpid()
    for line in requests:
        request = json.loads(line)
        op = request["op"]
        reply = (
            candidate.load(request["program"])
            if op == "load"
            else (candidate.reset() if op == "reset" else candidate.call(request))
        )
        if os.getpid() != me:  # a forked child of user code never answers
            os._exit(0)
        _send(out, reply)


if __name__ == "__main__":
    main()
