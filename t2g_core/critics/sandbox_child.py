"""Sandbox harness: runs one program against test cases, one case at a time, inside the sandbox process.

Started by :mod:`t2g_core.critics.sandbox` as ``python -I sandbox_child.py`` (standalone: imports nothing from
t2g_core). It reads one JSON job from stdin, then, in this order:

1. imports the stdlib modules user code may need (``preload``) while it can still read them;
2. drops privileges to the sandbox uid/gid (when started as root) - the parent already set the rlimits and,
   when available, put us in fresh network and PID namespaces;
3. installs an audit hook (PEP 578) that refuses process creation, ctypes, sockets, writes outside the work
   directory and reads of ``/proc/*/environ`` - a second layer, not a substitute for the OS limits;
4. for each case: executes the program afresh, defines ``check`` from the case source, calls ``check(candidate)``
   under ``sys.settrace`` line coverage of the program and a per-case ``setitimer`` deadline, and writes one JSON
   line ``<nonce> {...}`` to a private copy of stdout (user code's own prints go to a file in the work directory).
"""

import json
import os
import signal
import sys

NEVER_ALLOWED = (
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "subprocess.Popen",
    "os.kill",
    "os.killpg",
    "pty.spawn",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.cdata",
    "os.setuid",
)
NETWORK = (
    "socket.connect",
    "socket.bind",
    "socket.sendto",
    "socket.sendmsg",
    "socket.getaddrinfo",
    "socket.gethostbyname",
)
WRITE_EVENTS = (
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.chown",
    "os.symlink",
    "os.link",
    "os.truncate",
    "os.utime",
    "shutil.rmtree",
    "shutil.copyfile",
    "shutil.move",
)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class CaseTimeout(BaseException):
    """Raised by the per-case timer; a BaseException so that ``except Exception`` in user code does not swallow it."""


def _inside(path, root):
    try:
        real = os.path.realpath(os.fsdecode(path) if not isinstance(path, int) else "")
    except (TypeError, ValueError):
        return False
    return real == root or real.startswith(root + os.sep)


def _writes(mode, flags):
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and flags & WRITE_FLAGS != 0


def make_audit_hook(workdir, guard_network):
    root = os.path.realpath(workdir)

    def hook(event, args):
        if event in NEVER_ALLOWED or (guard_network and event in NETWORK):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args and args[0] in ("ctypes", "_ctypes"):
            raise PermissionError("sandbox: ctypes is not allowed")
        if event == "open" and args and not isinstance(args[0], int) and args[0] is not None:
            path = os.fsdecode(args[0])
            if path.startswith("/proc/") and path.endswith("/environ"):
                raise PermissionError(f"sandbox: reading {path} is not allowed")
            if _writes(args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None) and not _inside(
                path, root
            ):
                raise PermissionError(f"sandbox: writing {path} outside the work directory is not allowed")
        if event in WRITE_EVENTS and args and not isinstance(args[0], int) and not _inside(args[0], root):
            raise PermissionError(f"sandbox: {event} outside the work directory is not allowed")

    return hook


def drop_privileges(uid, gid):
    if uid is None or os.getuid() != 0:
        return
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _eq(left, right, left_is_actual):
    """``assert a == b`` rewritten by the parent so a failure says what came out and what was expected."""
    if left == right:
        return True
    actual, expected = (left, right) if left_is_actual else (right, left)
    raise AssertionError(f"got {_short(actual)}, expected {_short(expected)}")


def _short(value, n=120):
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - user objects may have broken __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= n else text[: n - 3] + "..."


def _solution_line(tb, filename):
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


class Coverage:
    """Lines of ``filename`` executed inside functions (module-level lines run in every case and carry no signal)."""

    def __init__(self, filename):
        self.filename, self.lines = filename, set()

    def _local(self, frame, event, arg):
        if event == "line":
            self.lines.add(frame.f_lineno)
        return self._local

    def global_trace(self, frame, event, arg):
        code = frame.f_code
        if code.co_filename == self.filename and code.co_name != "<module>":
            return self._local  # the "call" event's line is the def line: not recorded
        return None


def run_case(job, program_code, case, index):
    cov = Coverage(job["program_file"])
    ns = {"__name__": "__t2g_solution__", "__t2g_eq": _eq}
    result = {"index": index, "outcome": "pass", "message": None, "line": None}
    try:
        signal.setitimer(signal.ITIMER_REAL, job["timeout_s"])
        exec(program_code, ns)
        exec(compile(case["code"], "<test>", "exec"), ns)
        candidate = ns.get(job["entry_point"]) if job.get("entry_point") else None
        sys.settrace(cov.global_trace)
        if "check" in ns and candidate is not None:
            ns["check"](candidate)
    except CaseTimeout as exc:
        result.update(
            outcome="timeout",
            message=f"timed out after {job['timeout_s']:g} s",
            line=_solution_line(exc.__traceback__, job["program_file"]),
        )
    except AssertionError as exc:
        result.update(
            outcome="fail", message=str(exc) or None, line=_solution_line(exc.__traceback__, job["program_file"])
        )
    except BaseException as exc:  # noqa: BLE001 - SystemExit, MemoryError, RecursionError... are all case failures
        result.update(
            outcome="error",
            message=f"{type(exc).__name__}: {str(exc)[:200]}",
            line=_solution_line(exc.__traceback__, job["program_file"]),
        )
    finally:
        sys.settrace(None)
        signal.setitimer(signal.ITIMER_REAL, 0)
    result["covered"] = sorted(cov.lines)
    return result


def main():
    job = json.loads(sys.stdin.read())
    out_fd = os.dup(1)
    for name in job.get("preload", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module just is not preloaded
            pass
    os.chdir(job["workdir"])
    log = os.open(os.path.join(job["workdir"], "stdout.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    drop_privileges(job.get("uid"), job.get("gid"))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write raises OSError instead of killing us
    sys.setrecursionlimit(3000)
    if job.get("audit_guard", True):
        sys.addaudithook(make_audit_hook(job["workdir"], guard_network=True))
    me = os.getpid()
    try:
        program_code = compile(job["program"], job["program_file"], "exec")
    except SyntaxError as exc:
        _emit(
            out_fd,
            job["nonce"],
            {
                "index": -1,
                "outcome": "syntax_error",
                "message": f"SyntaxError: {exc.msg}",
                "line": exc.lineno,
                "covered": [],
            },
        )
        return
    for index, case in enumerate(job["cases"]):
        result = run_case(job, program_code, case, index + job.get("first_index", 0))
        if os.getpid() != me:  # a forked child of user code must never report or go on
            os._exit(0)
        _emit(out_fd, job["nonce"], result)


def _on_alarm(signum, frame):
    raise CaseTimeout()


def _emit(fd, nonce, result):
    data = (nonce + " " + json.dumps(result) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


if __name__ == "__main__":
    main()
