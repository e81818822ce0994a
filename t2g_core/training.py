"""What the hand-written training loops (PPO in :mod:`t2g_core.ppo`, the span tagger in
:mod:`t2g_core.reward_model.tagger_train`) share so that a resumed run reproduces the uninterrupted one: the data
order is a function of (seed, pass over the data), never of how far a process got, and a checkpoint folder appears
whole or not at all.

A checkpoint is written into a hidden sibling (:func:`staging_folder`, named for the writer so two writers never
share one) and moved into place by one rename (:func:`publish_folder`); a kill at any moment leaves either no folder
or a complete one. A sibling a killed write left behind is collected later with the other stale temporary files
(``t2g_core.housekeeping``).

A checkpoint's state files hold tensors and plain data only (numbers, strings, lists, tuples, dicts), and are read
back with ``torch.load(weights_only=True)`` (:func:`load_state`): a checkpoint lives on storage other processes may
write to, and a pickled object in it would run code when loaded, so anything else is refused, naming the file. The
random states are kept in that form too (:func:`rng_state`: numpy's generator state as a tensor of its keys).
"""

from __future__ import annotations

import errno
import os
import pickle
import random
import shutil
import uuid
from pathlib import Path

import numpy as np
import torch
from torch import Tensor


class UnsafeCheckpoint(ValueError):
    """A checkpoint file that holds more than tensors and plain data (or is not a checkpoint): it is not loaded."""


def save_state(state: dict, path: Path) -> None:
    """Write ``state`` (tensors and plain data only) as a torch file that :func:`load_state` reads."""
    torch.save(state, path)


def load_state(path: Path, map_location=None) -> dict:
    """The state in ``path``, unpickled with only tensors and plain data allowed: a file that asks for any other
    object (which would run code when loaded) is refused with :class:`UnsafeCheckpoint` and nothing in it runs."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsafeCheckpoint(
            f"{path}: refused: it holds more than tensors and plain data, and loading it could run code ({first}). "
            "Delete the checkpoint (or the run folder) to train from the start."
        ) from None
    except (RuntimeError, EOFError, OSError) as exc:
        raise UnsafeCheckpoint(f"{path}: not a readable checkpoint file ({exc})") from None


def rng_state() -> dict:
    """torch's, Python's and numpy's global random states, as tensors and plain data."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    numpy = {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos)}
    numpy |= {"has_gauss": int(has_gauss), "gauss": float(gauss)}
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": numpy}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))


def epoch_permutation(n: int, seed: int, epoch: int) -> Tensor:  # -> (n,) row numbers
    """The order of ``n`` rows in pass ``epoch`` over the data: a fresh permutation per pass, keyed by (seed, epoch)
    and drawn from a generator of its own (the global random state is untouched)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 7919 + epoch))


def writer_token() -> str:
    """A name part unique to this process (its pid and a random part; the global random states are untouched)."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def staging_folder(final: Path, token: str, *, create: bool = False) -> Path:
    """The hidden sibling ``final`` is written into, named for the writer ``token`` (the processes of one
    distributed run share a token, and each may add its own files). ``create``: create it."""
    tmp = final.with_name(f".{final.name}.tmp-{token}")
    if create:
        tmp.mkdir(parents=True)
    return tmp


def publish_folder(tmp: Path, final: Path) -> Path:
    """Move the completed ``tmp`` into place as ``final`` (replacing a folder of that name); returns ``final``. A
    folder already there is renamed aside first (a name of this writer's own) and then removed, so two writers
    publishing at once never remove each other's folder half-way."""
    while True:
        try:
            os.replace(tmp, final)
            return final
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        old = final.with_name(f".{final.name}.old-{writer_token()}")
        try:
            os.rename(final, old)
        except FileNotFoundError:  # another writer moved it first: try again
            continue
        shutil.rmtree(old, ignore_errors=True)
