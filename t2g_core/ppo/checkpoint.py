"""Atomic PPO checkpoints: everything needed to continue a run as if it had never stopped.

A checkpoint folder ``step-000010/`` holds the LoRA adapter (peft format), ``trainer.pt`` and ``rng-rank{r}.pt`` per
process. It is written into a temporary sibling and renamed into place, then ``latest`` is replaced atomically, so a
kill at any moment leaves the previous checkpoint intact. The ``.pt`` files are loaded with ``weights_only=True``
(``t2g_core.training.load_state``): a tampered file that would run code when unpickled is refused.
"""

from __future__ import annotations

from pathlib import Path

from t2g_core.store import write_text_atomic
from t2g_core.training import load_state, publish_folder, rng_state, save_state, set_rng_state, staging_folder

LATEST = "latest"


def checkpoint_folder(run_dir: Path, step: int) -> Path:
    """The folder checkpoint ``step`` is written to."""
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def save_checkpoint(
    run_dir: Path, step: int, *, save_adapter, trainer_state: dict, rank: int, world: int, barrier, token: str
) -> Path:
    """Write checkpoint ``step`` (rank 0 the shared state and ``save_adapter(folder)``, each rank its RNG state)
    through a staging folder named by ``token`` (the same in every process); returns its folder."""
    ckpt_root = Path(run_dir) / "checkpoints"
    final = checkpoint_folder(run_dir, step)
    tmp = staging_folder(final, token, create=rank == 0)
    if rank == 0:
        save_adapter(tmp / "adapter")
        save_state(trainer_state, tmp / "trainer.pt")
    barrier()
    save_state(rng_state(), tmp / f"rng-rank{rank}.pt")
    barrier()
    if rank == 0:
        publish_folder(tmp, final)
        write_text_atomic(ckpt_root / LATEST, final.name)
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
    state = load_state(path / "trainer.pt")
    rng_file = path / f"rng-rank{rank}.pt"
    if rng_file.exists():
        set_rng_state(load_state(rng_file))
    return state
