"""Processes, devices and model wrapping through ``accelerate``: one code path for one CPU process (the tests), one
GPU, and several processes under ``accelerate launch`` (DDP, or FSDP with the committed FSDP config).

Nothing here starts a process or reads an environment variable: the launcher starts the processes and the CLI joins
the process group (``t2g_cli.ppo``); :class:`Runtime` asks ``accelerate`` what it was given.
"""

from __future__ import annotations

import contextlib
import os

import torch
import torch.distributed as dist
from torch import Tensor, nn


def rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _collective_device() -> torch.device:
    """NCCL reduces CUDA tensors only; gloo (and a mixed ``cuda:nccl,cpu:gloo`` group) takes CPU tensors."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(t: Tensor) -> Tensor:
    """Sum ``t`` in place over processes (a no-op in one process)."""
    if rank_and_world()[1] > 1:
        buf = t.to(_collective_device())  # ``t`` itself when it is already there
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        if buf is not t:
            t.copy_(buf)
    return t


def global_sum(values: list[float]) -> list[float]:
    return all_reduce_sum(torch.tensor(values, dtype=torch.float64)).tolist()


def shared_token() -> str:
    """A name part unique to this run and the same in every process: rank 0's pid and random bits, shared by one
    all-reduce (the global random states are untouched)."""
    mine = [float(os.getpid()), float(int.from_bytes(os.urandom(6), "big"))] if rank_and_world()[0] == 0 else [0, 0]
    pid, bits = global_sum([float(v) for v in mine])
    return f"{int(pid)}-{int(bits):012x}"


def barrier() -> None:
    if rank_and_world()[1] > 1:
        dist.barrier()


def to_device(device, *tensors: Tensor) -> list[Tensor]:
    """The tensors on the model's device (bookkeeping tensors live on the CPU; the model's inputs go over)."""
    return [t.to(device) for t in tensors]


def use_cpu() -> bool:
    """Whether processes run on the CPU (gloo): the one switch between the CPU and CUDA paths."""
    return not torch.cuda.is_available()


class Runtime:
    """The accelerator of one training run: device, process rank and count, the wrapped model."""

    def __init__(self) -> None:
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs

        # no buffer broadcast: processes may run different numbers of no-grad forwards (rollouts, evaluation)
        ddp = DistributedDataParallelKwargs(broadcast_buffers=False)
        self.accelerator = Accelerator(cpu=use_cpu(), kwargs_handlers=[ddp])
        self.device = self.accelerator.device
        self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
        if rank_and_world()[1] != self.world:
            raise RuntimeError(
                f"a process group of {rank_and_world()[1]} processes exists but accelerate sees {self.world}: start "
                "the processes with `accelerate launch` (or torchrun) so both agree"
            )

    @property
    def fsdp(self) -> bool:
        return self.accelerator.distributed_type.name == "FSDP"

    def prepare(self, model: nn.Module, *optimizers: torch.optim.Optimizer) -> list:
        """``[wrapped model, *optimizers]``: DDP or FSDP around ``model`` when several processes share the run."""
        return list(self.accelerator.prepare(model, *optimizers)) if optimizers else [self.accelerator.prepare(model)]

    def unwrap(self, model: nn.Module) -> nn.Module:
        return self.accelerator.unwrap_model(model)

    def backward(self, loss: Tensor) -> None:
        """Backward of a loss pre-divided by the *global* token count: summed over processes it is the global
        mean, and DDP / FSDP average gradients over processes, hence the factor ``world``."""
        self.accelerator.backward(loss * self.world)

    def sync(self, model: nn.Module, on: bool):
        """Gradient all-reduce on this backward (``on``), or local accumulation only."""
        return contextlib.nullcontext() if on or self.world == 1 else self.accelerator.no_sync(model)

    @contextlib.contextmanager
    def gathered(self, model: nn.Module, writeback: bool = False):
        """The plain module with every weight present on this process (FSDP: a collective every process enters; DDP:
        nothing to do), for generation, uneven no-grad passes and checkpoints; ``writeback``: changes are kept."""
        if self.fsdp:
            from torch.distributed.fsdp import FullyShardedDataParallel

            with FullyShardedDataParallel.summon_full_params(model, writeback=writeback, recurse=True):
                yield self.unwrap(model)
        else:
            yield self.unwrap(model)

    def optimizer_state(self, model: nn.Module, optimizer) -> dict:
        """The whole optimizer state (FSDP: gathered from the shards; every process calls this)."""
        if self.fsdp:
            from torch.distributed.fsdp import FullyShardedDataParallel

            return FullyShardedDataParallel.optim_state_dict(model, getattr(optimizer, "optimizer", optimizer))
        return optimizer.state_dict()

    def load_optimizer_state(self, model: nn.Module, optimizer, state: dict) -> None:
        if self.fsdp:
            from torch.distributed.fsdp import FullyShardedDataParallel

            inner = getattr(optimizer, "optimizer", optimizer)
            state = FullyShardedDataParallel.optim_state_dict_to_load(model, inner, state)
        optimizer.load_state_dict(state)
