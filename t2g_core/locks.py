"""One writer at a time: a lock file beside a folder (or any shared file) that two runs must not write at once.

``with folder_lock(folder, owner):`` holds an exclusive ``flock`` on ``<parent>/.<name>.lock`` (opened only as itself:
a symlink, FIFO or second hard link in its place is refused, never written through) and records who holds it
(owner, pid, host, since). A second writer gets :class:`Busy` at once, naming the holder
(``busy: run 3f2a... (pid 4242 on host gpu-1, since 2026-01-02T03:04:05Z) holds .../checkpoints/ppo/ppo-...``), or
waits for it with ``wait_s``. The kernel releases the lock when its holder dies however it dies (``kill -9``
included), so a stale lock of a dead process is taken over by the next writer without anyone deleting a file; the
holder's record is then replaced. The lock files stay (a few bytes each): deleting one while another process waits
on it would let two writers in.

``flock`` holds across the processes of one machine and, on Linux, over NFSv4; on a shared file system without
working locks, keep one pipeline per workspace.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path


def _start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``), or None when there is no such process."""
    try:
        record = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return record.rsplit(")", 1)[1].split()[19]  # field 22 of stat(5): starttime, after the (command name)


def process_identity(pid: int | None = None) -> str:
    """``host:pid:start`` of a process: unlike a pid alone it never names a later process that reuses the pid."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or '?'}"


def identity_alive(identity: str) -> bool | None:
    """Whether the process :func:`process_identity` named is still running; None when it ran on another host (its
    liveness cannot be seen from here)."""
    host, pid, start = identity.rsplit(":", 2)
    if host != socket.gethostname():
        return None
    now = _start_ticks(int(pid))
    return now is not None and (start == "?" or now == start)


class Busy(RuntimeError):
    """Another live writer holds the lock; the message names it."""


def lock_path(target: str | Path) -> Path:
    target = Path(target)
    return target.parent / f".{target.name}.lock"


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another run (no record yet)"
    return f"run {info.get('owner')} (pid {info.get('pid')} on host {info.get('host')}, since {info.get('since')})"


def _acquire(fd: int, target: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise Busy(
                    f"busy: {_holder(fd)} holds {target}; wait for it to finish, or stop it (a lock whose process "
                    "has ended is taken over by the next run)"
                ) from None
            time.sleep(0.05)


def _open_lock(path: Path) -> int:
    """The lock file, opened only as itself: never through a symlink or a second hard link (whose target would be
    truncated and overwritten with the holder's record) and never a FIFO or device; ValueError otherwise."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise ValueError(f"{path}: a symbolic link, not a plain lock file; left as it is") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise ValueError(f"{path}: not a plain lock file (a FIFO, device or second hard link); left as it is")
    return fd


@contextlib.contextmanager
def folder_lock(target: str | Path, owner: str, *, wait_s: float = 0.0) -> Iterator[None]:
    """Hold the one-writer lock of ``target`` (a folder or a file) while the block runs; :class:`Busy` if another
    live process holds it for more than ``wait_s`` seconds."""
    target = Path(target)
    path = lock_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_lock(path)
    try:
        _acquire(fd, target, wait_s)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record = json.dumps({"owner": owner, "pid": os.getpid(), "host": socket.gethostname(), "since": since})
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode("utf-8"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
