"""What the hand-written training loops (PPO in :mod:`t2g_core.ppo`, the span tagger in
:mod:`t2g_core.reward_model.tagger_train`) share so that a resumed run reproduces the uninterrupted one: the data
order is a function of (seed, pass over the data), never of how far a process got, and a checkpoint folder appears
whole or not at all.

A checkpoint is written into a hidden sibling (:func:`staging_folder`) and moved into place by one rename
(:func:`publish_folder`); a kill at any moment leaves either no folder or a complete one, and the sibling a killed
write left behind is cleared by the next write.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from torch import Tensor


def epoch_permutation(n: int, seed: int, epoch: int) -> Tensor:  # -> (n,) row numbers
    """The order of ``n`` rows in pass ``epoch`` over the data: a fresh permutation per pass, keyed by (seed, epoch)
    and drawn from a generator of its own (the global random state is untouched)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 7919 + epoch))


def staging_folder(final: Path, *, create: bool = False) -> Path:
    """The hidden sibling that ``final`` is written into; the same name in every process (each may add its own
    files). ``create``: empty it first (a killed write may have left one) and create it."""
    tmp = final.with_name(f".{final.name}.tmp")
    if create:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    return tmp


def publish_folder(tmp: Path, final: Path) -> Path:
    """Move the completed ``tmp`` into place as ``final`` (replacing a folder of that name); returns ``final``."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final
