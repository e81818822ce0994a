"""Isolation backends: how a sandbox process is wrapped so it cannot reach the machine it runs on.

``bwrap``, ``unshare`` or ``none`` (only by name); ``auto`` picks the first of ``bwrap``, ``unshare`` that works and
refuses to run untrusted code when none does. What each backend hides and why every writable tmpfs is sized:
docs/annotation.md, "Code critic".
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

BACKENDS = ("bwrap", "unshare", "none")
SANDBOX_DIR = "/sandbox"  # where the work directory is mounted inside bwrap
SCRATCH_MB = 64  # size of each writable tmpfs a sandbox sees (its /tmp and its work folder)


class IsolationUnavailable(RuntimeError):
    """No isolation backend works on this machine (and ``none`` was not chosen)."""


@dataclass(frozen=True)
class Isolation:
    backend: str
    interpreter: str = field(default_factory=lambda: base_interpreter())
    hidden: tuple[str, ...] = ()  # unshare: folders replaced by empty tmpfs mounts

    def wrap(self, argv: list[str], scratch_mb: int = SCRATCH_MB) -> tuple[list[str], str]:
        """The command running ``argv`` (an interpreter command line) isolated, and the work directory it sees
        (private to the sandbox, except with ``none``, where the caller creates it: see :meth:`needs_host_dir`);
        ``scratch_mb``: the size of each writable tmpfs in it."""
        return getattr(self, f"_{self.backend}")(argv, scratch_mb)

    @property
    def needs_host_dir(self) -> bool:
        return self.backend == "none"

    def _bwrap(self, argv: list[str], scratch_mb: int) -> tuple[list[str], str]:
        binds: list[str] = []
        for path in [*_system_dirs(), _prefix(self.interpreter)]:
            binds += ["--ro-bind", path, path]
        size = str(scratch_mb << 20)
        # the new root and /dev are unsized tmpfs mounts: read-only once the mount points exist (device nodes such
        # as /dev/null stay usable); then the two sized scratch mounts go on top
        cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", *binds]
        cmd += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev", "--dir", "/tmp", "--dir", SANDBOX_DIR]
        cmd += ["--remount-ro", "/", "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", SANDBOX_DIR]
        env = ["--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", SANDBOX_DIR, "--setenv", "LANG", "C.UTF-8"]
        return [*cmd, "--chdir", SANDBOX_DIR, "--clearenv", *env, "--", *argv], SANDBOX_DIR

    def _unshare(self, argv: list[str], scratch_mb: int) -> tuple[list[str], str]:
        user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        keep = _prefix(self.interpreter)
        hide = [h for h in self.hidden if not (keep + "/").startswith(h.rstrip("/") + "/")]
        hide += [d for d in ("/dev/shm",) if Path(d).is_dir()]  # the host's shared memory: writable by every user
        mounts = [f"mount -t tmpfs -o ro,size=4k,mode=755 t2g {_quote(h)}" for h in hide if Path(h).is_dir()]
        work = "/tmp/sandbox"  # inside the fresh /tmp: private to the sandbox
        scratch = f"mount -t tmpfs -o size={scratch_mb}m t2g /tmp"
        script = " && ".join([*mounts, scratch, f"mkdir -m 777 {work}", f"cd {work}", 'exec "$@"'])
        namespaces = ["--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc"]
        return ["unshare", *user, *namespaces, "sh", "-c", script, "sh", *argv], work

    def _none(self, argv: list[str], scratch_mb: int) -> tuple[list[str], str]:
        return argv, ""


def base_interpreter() -> str:
    """The real interpreter behind this one (a virtual environment's python is a link to it): sandboxes run the
    standard library only, so they need no virtual environment, and its folder may be hidden from them."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _quote(path: str) -> str:
    return "'" + path.replace("'", "'\\''") + "'"


def _system_dirs() -> list[str]:
    return [d for d in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/alternatives") if Path(d).exists()]


def _prefix(interpreter: str) -> str:
    """The installation folder of ``interpreter`` (its ``sys.base_prefix``: the standard library lives there)."""
    return str(Path(os.path.realpath(interpreter)).parent.parent)


SYSTEM_TOP = ("usr", "lib", "lib64", "lib32", "bin", "sbin", "etc", "proc", "dev", "sys")


def default_hidden(interpreter: str | None = None) -> tuple[str, ...]:
    """Folders hidden from an ``unshare`` sandbox: every top-level folder but the system ones and the one holding
    the interpreter (homes, ``/tmp``, ``/var``, ``/opt``, the project and its workspace wherever they live)."""
    keep = {*SYSTEM_TOP, Path(_prefix(interpreter or base_interpreter())).parts[1]}
    return tuple(
        str(p) for p in sorted(Path("/").iterdir()) if p.is_dir() and not p.is_symlink() and p.name not in keep
    )


@functools.lru_cache(maxsize=8)
def works(backend: str, interpreter: str | None = None) -> bool:
    """True when ``backend`` can start ``interpreter`` on this machine (a probe run, cached per process)."""
    interpreter = interpreter or base_interpreter()
    if backend == "none":
        return True
    if shutil.which(backend) is None:
        return False
    probe = Isolation(backend, interpreter, default_hidden(interpreter) if backend == "unshare" else ())
    cmd, _ = probe.wrap([interpreter, "-I", "-c", "pass"])
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30, stdin=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=1)
def _warn_unisolated() -> None:
    """Once per process: untrusted code will run as this user, with only the audit hook and rlimits around it."""
    warnings.warn(
        "sandbox_isolation=none: untrusted code runs without OS isolation (same user, same filesystem, network "
        "reachable); use it only for code you trust",
        UnsafeSandboxWarning,
        stacklevel=3,
    )


class UnsafeSandboxWarning(UserWarning):
    """Untrusted code is about to run without OS isolation (``sandbox_isolation: none``)."""


def resolve(choice: str, interpreter: str | None = None) -> Isolation:
    """The backend for ``choice`` (``auto`` or a name), checked to work; raises IsolationUnavailable otherwise."""
    interpreter = interpreter or base_interpreter()
    candidates = ("bwrap", "unshare") if choice == "auto" else (choice,)
    for backend in candidates:
        if backend not in BACKENDS:
            raise ValueError(f"unknown sandbox isolation {backend!r}; choose auto, {', '.join(BACKENDS)}")
        if backend == "none":
            _warn_unisolated()
        if works(backend, interpreter):
            return Isolation(backend, interpreter, default_hidden(interpreter) if backend == "unshare" else ())
    raise IsolationUnavailable(
        f"no sandbox isolation works here (tried {', '.join(candidates)}): install bubblewrap (Debian: apt-get install "
        "bubblewrap) or allow unprivileged user namespaces; `sandbox_isolation: none` runs untrusted code unisolated"
    )
