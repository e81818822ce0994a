"""Atomic PPO checkpoints: everything needed to continue a run as if it had never stopped.

A checkpoint folder ``step-000010/`` holds the LoRA adapter (peft format, loadable on its own), ``trainer.pt``
(value model, optimizer, scheduler, KL controller, metric history, data position) and ``rng-rank{r}.pt`` per
process. It is written into a temporary sibling and renamed into place, then ``latest`` (a text file naming it) is
replaced atomically, so a kill at any moment leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from t2g_core.training import publish_folder, staging_folder

LATEST = "latest"


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def _replace_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def checkpoint_folder(run_dir: Path, step: int) -> Path:
    """The folder checkpoint ``step`` is written to."""
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def save_checkpoint(
    run_dir: Path, step: int, *, save_adapter, trainer_state: dict, rank: int, world: int, barrier
) -> Path:
    """Write checkpoint ``step`` (rank 0 writes the shared state, each rank its RNG state); returns its folder.
    ``save_adapter(folder)`` writes the policy's adapter in peft's format."""
    ckpt_root = Path(run_dir) / "checkpoints"
    final = checkpoint_folder(run_dir, step)
    tmp = staging_folder(final, create=rank == 0)
    if rank == 0:
        save_adapter(tmp / "adapter")
        torch.save(trainer_state, tmp / "trainer.pt")
    barrier()
    torch.save(rng_state(), tmp / f"rng-rank{rank}.pt")
    barrier()
    if rank == 0:
        publish_folder(tmp, final)
        _replace_text(ckpt_root / LATEST, final.name)
    barrier()
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = Path(run_dir) / "checkpoints" / LATEST
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text(encoding="utf-8").strip()
    if not (path / "trainer.pt").exists():
        raise FileNotFoundError(f"{pointer}: names {path.name}, which has no trainer.pt")
    return path


def load_checkpoint(path: Path, *, policy, rank: int) -> dict:
    """Load adapter weights into ``policy`` in place, restore this rank's RNG state; return the trainer state."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter = path / "adapter"
    weights = adapter / "adapter_model.safetensors"
    set_peft_model_state_dict(policy, load_file(str(weights)))
    state = torch.load(path / "trainer.pt", weights_only=False)
    rng_file = path / f"rng-rank{rank}.pt"
    if rng_file.exists():
        set_rng_state(torch.load(rng_file, weights_only=False))
    return state
