"""A stage run as a gang of processes: every rank started together by ``accelerate launch`` (torchrun underneath, a
static rendezvous), each running the stage function on the same typed inputs, rank 0 writing the outputs.

:func:`launch` writes a :class:`GangRun` into the stage's ``gang/<key>/`` folder, starts ``accelerate launch ... -m
t2g_cli gang-rank`` (``t2g_cli/gang.py``) in a process group of its own, relays rank 0's standard output (its
progress lines to ``progress``, the rest to ``log``), and returns rank 0's output reference as JSON. A failed gang
raises :class:`GangFailed` with the rank torchrun saw fail first and that rank's last stderr lines
(``rank-<r>.log``). The launcher stays in the caller's process group (a cancelled run's signal reaches it, and
torchrun ends its ranks); a caller interrupted while the gang runs stops the launcher and every rank under it. Nothing
here reads the environment: the caller hands over the ranks' environment and rendezvous.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil
import yaml
from pydantic import BaseModel, ConfigDict

from t2g_core.config.orchestration import Layout
from t2g_core.progress import Progress

PROGRESS = "t2g-progress "  # a rank-0 stdout line carrying one progress call as JSON
SPEC, OUTPUT, LAUNCHER_LOG = "gang.json", "ref.json", "launcher.log"


class GangFailed(RuntimeError):
    """A rank of the gang failed; the message names it, how it ended and its last stderr lines."""


class GangRun(BaseModel):
    """What every rank of a gang is handed: the stage function, its typed inputs as JSON, its key and tracking run."""

    model_config = ConfigDict(frozen=True)
    function: str  # ``t2g_core.stages.<module>.<function>``
    inputs: dict[str, Any]
    workspace: dict[str, Any]
    key: str
    run_id: str | None = None
    world: int
    folder: str

    def file(self, name: str) -> Path:
        return Path(self.folder) / name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_command(spec: GangRun, layout: Layout, config: Path, rendezvous: tuple[int | str, str, int]) -> list[str]:
    """``accelerate launch`` of ``layout`` with ``config`` (never ``--cpu`` / ``use_cpu``: accelerate then starts one
    process); ``rendezvous``: this machine's rank (or the variable its shell expands to it), the main machine's address
    and port."""
    if yaml.safe_load(config.read_text(encoding="utf-8")).get("use_cpu"):
        raise ValueError(f"{config} sets use_cpu: true, with which accelerate launch starts one process, not a gang")
    machine, address, port = rendezvous
    return [
        *(sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config)),
        *("--num_processes", str(layout.world), "--num_machines", str(layout.machines)),
        *("--machine_rank", str(machine), "--main_process_ip", address, "--main_process_port", str(port)),
        *("--dynamo_backend", "no", "-m", "t2g_cli", "gang-rank", str(spec.file(SPEC))),
    ]


def launch(
    spec: GangRun,
    command: list[str],
    env: Mapping[str, str],
    log: Callable[[str], None],
    progress: Progress,
) -> str:
    """Run the gang ``command`` starts for ``spec`` until every rank is done; rank 0's output reference (JSON)."""
    folder = Path(spec.folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in [*folder.glob("rank-*.log"), folder / OUTPUT]:
        old.unlink(missing_ok=True)
    spec.file(SPEC).write_text(spec.model_dump_json(), encoding="utf-8")
    with open(folder / LAUNCHER_LOG, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, env=dict(env))
        try:
            for line in proc.stdout:
                relay(line.rstrip("\n"), log, progress)
            code = proc.wait()
        finally:
            stop(proc)
    if code:
        raise GangFailed(failure(spec, code))
    return spec.file(OUTPUT).read_text(encoding="utf-8")


def relay(line: str, log: Callable[[str], None], progress: Progress) -> None:
    if line.startswith(PROGRESS):
        call = json.loads(line.removeprefix(PROGRESS))
        progress(call["phase"], call["done"], call["total"], call.get("metrics"))
    elif line.strip():
        log(line)


def print_progress(phase: str, done: int, total: int, metrics: Mapping[str, float] | None = None) -> None:
    """Rank 0's progress sink: one line the launching side turns back into the same call (:func:`relay`)."""
    call = {"phase": phase, "done": done, "total": total, "metrics": dict(metrics or {})}
    print(PROGRESS + json.dumps(call, default=float), flush=True)


def stop(proc: subprocess.Popen) -> None:
    """End the launcher and every process under it, if they still run (torchrun starts each rank in a session of its
    own, so a signal to a process group would miss them): SIGTERM, then SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.terminate()
        for p in psutil.wait_procs(tree, timeout=30)[1]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    proc.wait()


def failure(spec: GangRun, code: int) -> str:
    """Which rank failed first (torchrun's "Root Cause"), how it ended, and its last stderr lines."""
    launcher = spec.file(LAUNCHER_LOG).read_text(encoding="utf-8", errors="replace")
    root = re.search(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", launcher, re.S)
    if root is None:
        return f"accelerate launch exited with code {code} before its ranks ran:\n{tail(launcher)}"
    rank, code = int(root[1]), int(root[2])
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    log = spec.file(f"rank-{rank}.log")
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else launcher
    error = f": {tail(text, 1).removeprefix(f'[rank{rank}]: ')}" if code > 0 else ""  # its exception, last
    return f"rank {rank} of the {spec.world}-process gang {how}{error}; its last stderr lines ({log}):\n{tail(text)}"


def tail(text: str, lines: int = 15) -> str:
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])
