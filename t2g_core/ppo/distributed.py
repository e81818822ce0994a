"""Process-group helpers: the trainer runs unchanged in one process or under ``accelerate launch`` / torchrun.

Nothing here starts a process group (that reads env vars, which t2g_core never does): the launcher or the CLI does,
and these helpers only ask ``torch.distributed`` whether one exists.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(t: Tensor) -> Tensor:
    """Sum ``t`` in place over processes (a no-op in one process)."""
    if rank_and_world()[1] > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def global_sum(values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    return all_reduce_sum(t).tolist()


def all_reduce_grads(params: list[torch.nn.Parameter]) -> None:
    """Sum gradients over processes. Losses are pre-divided by the *global* token count, so the sum is the mean."""
    if rank_and_world()[1] == 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)


def barrier() -> None:
    if rank_and_world()[1] > 1:
        dist.barrier()
