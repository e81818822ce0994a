"""One model's optimizer in PPO: AdamW with its own gradient clip and learning-rate schedule, and the snapshot that
lets the KL early stop undo (or scale back) the step that crossed ``max_approx_kl`` (only the actor's, only while the
stop is on). The schedule's formula: docs/ppo.md, "The learning-rate schedule".
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from t2g_core.config.ppo import PPOConfig
from t2g_core.ppo.distributed import Runtime, all_reduce_sum

# (step, planned update j, updates taken) -> multiplier of the base learning rate
LRFactor = Callable[[int, int, int], float]


def lr_factor(cfg: PPOConfig, *, actor: bool = True) -> LRFactor:
    """The multiplier (docs/ppo.md, "The learning-rate schedule") of (step, planned update j, updates taken)."""
    warm = max(cfg.warmup_steps, 1)
    first = cfg.critic_warmup_steps if actor else 0
    per_step = cfg.ppo_epochs * cfg.minibatches

    def factor(step: int, j: int, taken: int) -> float:
        progress = (step - first + j / per_step) / max(cfg.steps - first, 1)
        decay = max(0.0, 1.0 - progress) if cfg.lr_schedule == "linear" else 1.0
        return min(1.0, (taken + 1) / warm) * decay

    return factor


def clip_grads(params: list[torch.nn.Parameter], max_norm: float, sharded: bool) -> float:
    """Scale the gradients of ``params`` to a global norm of at most ``max_norm``; returns the norm before clipping.
    ``sharded`` (FSDP): each process holds a shard of every gradient, so the squared norms are summed over them."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    if sharded:
        norm = all_reduce_sum(norm.double().pow(2)).sqrt()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return float(norm)


class StepSnapshot:
    """What one optimizer step changes (parameters, AdamW moments, the warm-up count), taken before the step so it
    can be undone once: a copy of every parameter and its state, so only a revertible optimizer keeps one."""

    def __init__(self) -> None:
        self._saved: tuple[list[torch.Tensor], list[dict | None], int] | None = None

    def take(self, params: list[torch.nn.Parameter], opt: torch.optim.Optimizer, taken: int) -> None:
        state = [_copy_state(opt.state[p]) if p in opt.state else None for p in params]
        self._saved = ([p.detach().clone() for p in params], state, taken)

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data the snapshot holds (parameter copies and optimizer state); 0 with nothing saved."""
        if self._saved is None:
            return 0
        saved, state, _ = self._saved
        moments = [v for per_param in state if per_param for v in per_param.values() if torch.is_tensor(v)]
        return sum(t.numel() * t.element_size() for t in saved + moments)

    def restore(self, params: list[torch.nn.Parameter], opt: torch.optim.Optimizer) -> int | None:
        """Put the saved state back in place and forget it; the saved warm-up count (None: nothing saved)."""
        if self._saved is None:
            return None
        saved, state, taken = self._saved
        with torch.no_grad():
            for p, s, per_param in zip(params, saved, state, strict=True):
                p.copy_(s)
                if per_param is None:  # the step was this parameter's first: it had no state before
                    opt.state.pop(p, None)
                    continue
                for k, v in per_param.items():
                    current = opt.state[p].get(k)
                    if torch.is_tensor(v) and torch.is_tensor(current):
                        current.copy_(v)
                    else:
                        opt.state[p][k] = v
        self._saved = None
        return taken

    def scale(self, params: list[torch.nn.Parameter], alpha: float) -> bool:
        """Shorten the saved step to ``alpha`` of its length: p = saved + alpha (p - saved), the optimizer's moments
        kept; False with nothing saved."""
        if self._saved is None:
            return False
        with torch.no_grad():
            for p, s in zip(params, self._saved[0], strict=True):
                p.sub_(s).mul_(alpha).add_(s)
        return True

    def clear(self) -> None:
        self._saved = None


def _copy_state(per_param: dict) -> dict:
    return {k: v.clone() if torch.is_tensor(v) else copy.deepcopy(v) for k, v in per_param.items()}


class Optimizer:
    """One model's AdamW with its own gradient clip and learning-rate schedule. ``revertible``: keep a
    :class:`StepSnapshot` before every :meth:`step`, so :meth:`revert` can undo the last one."""

    def __init__(
        self,
        params: list[torch.nn.Parameter],
        lr: float,
        max_grad_norm: float,
        factor: LRFactor,
        revertible: bool = True,
    ):
        self.params, self.base_lr, self.max_grad_norm, self.factor = params, lr, max_grad_norm, factor
        self.opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        self.taken = 0  # updates applied (warm-up counts these)
        self.sharded = False  # set when FSDP shards the parameters (the clip's norm is then summed over processes)
        self.snapshot = StepSnapshot() if revertible else None

    def step(self, step: int, j: int) -> float:
        """Clip, set the scheduled rate, update; returns the gradient norm before clipping."""
        norm = clip_grads(self.params, self.max_grad_norm, self.sharded)
        if self.snapshot is not None:
            self.snapshot.take(self.params, self.opt, self.taken)
        for group in self.opt.param_groups:
            group["lr"] = self.base_lr * self.factor(step, j, self.taken)
        self.opt.step()
        self.taken += 1
        return norm

    @property
    def snapshot_bytes(self) -> int:
        return self.snapshot.nbytes if self.snapshot is not None else 0

    def scale_last(self, alpha: float) -> bool:
        """Shorten the last :meth:`step` to ``alpha`` of its length; False when there is none to shorten."""
        return self.snapshot.scale(self.params, alpha) if self.snapshot is not None else False

    def revert(self) -> bool:
        """Undo the last :meth:`step` (parameters, moments, warm-up count); False when there is none to undo."""
        taken = self.snapshot.restore(self.params, self.opt) if self.snapshot is not None else None
        if taken is None:
            return False
        self.taken = taken
        return True

    def commit(self) -> None:
        """Make the steps taken so far final: :meth:`revert` has nothing to undo until the next :meth:`step`."""
        if self.snapshot is not None:
            self.snapshot.clear()

    def learning_rate(self, step: int) -> float:
        """The scheduled rate of the first planned update of ``step`` after the updates taken so far."""
        return self.base_lr * self.factor(step, 0, self.taken)

    def state_dict(self, runtime: Runtime, model) -> dict:
        return {"opt": runtime.optimizer_state(model, self.opt), "taken": self.taken}

    def load_state_dict(self, runtime: Runtime, model, state: dict) -> None:
        runtime.load_optimizer_state(model, self.opt, state["opt"])
        self.taken = int(state["taken"])
