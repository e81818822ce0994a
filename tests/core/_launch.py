"""``accelerate launch`` on this machine: DDP over N processes (gloo without CUDA) on a free port."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from t2g_core.gang import free_port


def accelerate_launch(processes: int) -> list[str]:
    """``accelerate launch`` with DDP over ``processes`` processes; on a machine without CUDA they use gloo."""
    exe = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    return [exe, "launch", "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1"] + [
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
    ]
