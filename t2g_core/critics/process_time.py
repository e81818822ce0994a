"""How much time a sandboxed process used itself, whatever else the machine was doing (so a verdict does not depend
on how busy the machine is): own time = max(cpu_time, wall_time - run_queue_delay). Why, and how the interpreter is
found under its wrapper: docs/annotation.md, "Own time of a sandboxed process".
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
COMM_LEN = 15  # the kernel keeps this many characters of a command name
WRAPPERS = ("bwrap", "unshare")  # processes between this one and the sandboxed interpreter


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    cpu_s: float | None  # CPU time of the interpreter (all threads); None when it could not be read
    queued_s: float | None  # run-queue delay of its main thread


def _stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces and parentheses)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (a scan of ``/proc``: the ``children`` file is not built into every kernel)."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if int(_stat_fields(int(entry.name))[1]) == pid:  # field 4 of stat: the parent's PID
                    out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return sorted(out)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class ProcessClock:
    """The own time of the interpreter started under the wrapper process ``root_pid`` (see the module doc)."""

    def __init__(self, root_pid: int, interpreter: str, max_depth: int = 4):
        self.root_pid, self.max_depth = root_pid, max_depth
        self.name = os.path.basename(interpreter)[:COMM_LEN]
        self.pid: int | None = None

    def _find(self) -> int | None:
        """The interpreter's host PID, down the wrapper chain from ``root_pid``. Until the interpreter runs, the
        process that will become it (``sh`` before its ``exec``, bubblewrap's child before its ``exec``: the same
        PID), looked up again next time."""
        pid = self.root_pid
        for _ in range(self.max_depth):
            name = _comm(pid)
            if name == self.name:
                self.pid = pid
                return pid
            children = _children(pid) if name in WRAPPERS else []
            if not children:
                return pid if name else None
            pid = children[0]
        return pid

    def sample(self) -> Sample:
        now = time.monotonic()
        pid = self.pid or self._find()
        if pid is None:
            return Sample(now, None, None)
        try:
            fields = _stat_fields(pid)
            cpu = (int(fields[11]) + int(fields[12])) * TICK_S  # utime + stime (fields 14 and 15 of stat)
            queued = int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return Sample(now, None, None)
        return Sample(now, cpu, queued)

    def birth(self) -> Sample | None:
        """The interpreter's start (its fork: CPU time and run-queue delay are zero then), for timing its start-up
        without counting the wrapper's set-up before it."""
        now = time.monotonic()
        pid = self.pid or self._find()
        try:
            started = int(_stat_fields(pid)[19]) * TICK_S if pid is not None else None  # field 22
        except (OSError, IndexError, ValueError):
            started = None
        if started is None:
            return None
        return Sample(now - (time.clock_gettime(time.CLOCK_BOOTTIME) - started), 0.0, 0.0)

    def own_since(self, start: Sample, waits_count: bool = True) -> tuple[float, float]:
        """``(own time, wall time)`` since ``start``, in seconds (own time is wall time when unreadable);
        ``waits_count=False``: CPU time alone."""
        now = self.sample()
        wall = now.at - start.at
        if None in (start.cpu_s, start.queued_s, now.cpu_s, now.queued_s):
            return wall, wall
        cpu = now.cpu_s - start.cpu_s
        return (max(cpu, wall - (now.queued_s - start.queued_s)) if waits_count else cpu), wall
