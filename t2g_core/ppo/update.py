"""The PPO update, step 7 of a PPO step: epochs over global minibatches, each a forward and backward with the
clipped policy loss and (with a critic) ``vf_coef`` times the clipped value loss, token means over the global
minibatch.

Early stop (``max_approx_kl``; None = off): above the bound, the update that crossed it is pulled back
(:func:`pull_back`) and the batch stops; a last forward checks the last update (docs/ppo.md, "The update").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch import Tensor

from t2g_core.config.ppo import PPOConfig
from t2g_core.ppo.distributed import Runtime, all_reduce_sum, global_sum, to_device
from t2g_core.ppo.experience import Experience, FirstForward, uses_critic
from t2g_core.ppo.models import forward_in_micro_batches
from t2g_core.ppo.optimizer import Optimizer
from t2g_core.ppo.rollout import Rollout
from t2g_core.ppo.sampling import sample_seed
from t2g_core.rl import policy_loss, value_loss


def _minibatches(cfg: PPOConfig, step: int, epoch: int, local_pos: dict[int, int]) -> list[list[int]]:
    """Local row numbers of each global minibatch (the same split however many processes share the batch)."""
    generator = torch.Generator().manual_seed(sample_seed(cfg.seed + 1, step, epoch))
    perm = torch.randperm(cfg.batch_size, generator=generator)
    size = cfg.batch_size // cfg.minibatches
    groups = [perm[i * size : (i + 1) * size].tolist() for i in range(cfg.minibatches)]
    return [[local_pos[g] for g in group if g in local_pos] for group in groups]


def _chunks(rows: list[int], n: int) -> list[list[int]]:
    size = math.ceil(len(rows) / n) if rows else 0
    return [rows[i : i + size] for i in range(0, len(rows), size)] if rows else []


MINIBATCH_STATS = ("policy", "value", "clipfrac", "approx_kl", "ratio", "vf_clipfrac")


def _forward(runtime: Runtime, model, ro: Rollout, idx: Tensor, cfg: PPOConfig, with_entropy: bool = False):
    """The training forward of rows ``idx`` (with gradients): log-probs, values (or None) and, if asked, entropy."""
    mask = ro.response_mask[idx]
    args = to_device(runtime.device, ro.query_ids[idx], ro.query_mask[idx], ro.response_ids[idx], mask)
    return model(*args, cfg.sampling, with_values=uses_critic(cfg), with_entropy=with_entropy)


def first_forward(runtime: Runtime, model, ro: Rollout, cfg: PPOConfig, step: int) -> FirstForward:
    """The step's first training forward, run before the experience exists: with one epoch of one minibatch in one
    chunk (:func:`~t2g_core.ppo.experience.reuses_first_forward`) its log-probs, values and entropy, detached, are the
    rollout policy's, so the no-grad old-log-prob and value pass is not run; :func:`ppo_update` trains on its graph."""
    local_pos = {g: i for i, g in enumerate(ro.global_index)}
    rows = _minibatches(cfg, step, 0, local_pos)[0]
    logprobs, values, entropy = _forward(runtime, model, ro, torch.tensor(rows), cfg, with_entropy=True)
    return FirstForward(rows, logprobs.cpu(), None if values is None else values.float().cpu(), entropy.cpu())


def minibatch_grads(
    runtime: Runtime,
    model,
    ro: Rollout,
    exp: Experience,
    rows: list[int],
    cfg: PPOConfig,
    first: FirstForward | None = None,
):
    """Forward and backward of one global minibatch (gradients left in the parameters); its global statistics, whose
    ``approx_kl`` is the policy's *before* this minibatch's update. ``first``: its forward, already run."""
    critic = uses_critic(cfg)
    n_tokens = global_sum([float(ro.response_mask[rows].sum()) if rows else 0.0])[0]
    sums = torch.zeros(len(MINIBATCH_STATS), dtype=torch.float64)
    model.zero_grad(set_to_none=True)
    # A process whose rows are not in this minibatch still takes part in the gradient all-reduce: one pass over its
    # first row with the loss scaled to zero. The all-reduce runs on each process's last backward only.
    chunks = _chunks(rows, cfg.grad_accum) or [[0]]
    for i, chunk in enumerate(chunks):
        idx, weight = torch.tensor(chunk), 1.0 if rows else 0.0
        mask = ro.response_mask[idx]
        with runtime.sync(model, on=i == len(chunks) - 1):
            if first is None:
                logprobs, values = _forward(runtime, model, ro, idx, cfg)
                logprobs, values = logprobs.cpu(), None if values is None else values.float().cpu()
            else:
                logprobs, values = first.logprobs, first.values
            pl, ps = policy_loss(logprobs, exp.old_logprobs[idx], exp.advantages[idx], mask, cfg.cliprange, n_tokens)
            loss, vl, vs = pl, torch.zeros(()), {"vf_clipfrac": torch.zeros(())}
            if critic:
                vl, vs = value_loss(values, exp.values[idx], exp.returns[idx], mask, cfg.cliprange_value, n_tokens)
                loss = pl + cfg.vf_coef * vl
            runtime.backward(weight * loss)
        stats = [pl.detach(), vl.detach(), ps["clipfrac"], ps["approx_kl"], ps["ratio"], vs["vf_clipfrac"]]
        sums += weight * torch.stack(stats).to(torch.float64)
    return dict(zip(MINIBATCH_STATS, all_reduce_sum(sums).tolist(), strict=True))


@torch.no_grad()
def approx_kl_now(runtime: Runtime, model, ro: Rollout, exp: Experience, rows: list[int], cfg: PPOConfig) -> float:
    """Global approximate KL(old || current policy) over the rows ``rows`` (the early stop's check of the last
    update; every process calls it, rows or not)."""
    n_tokens = global_sum([float(ro.response_mask[rows].sum()) if rows else 0.0])[0]
    total = torch.zeros(1, dtype=torch.float64)
    with runtime.gathered(model) as plain:
        if rows:
            idx = torch.tensor(rows)
            mask = ro.response_mask[idx]
            args = to_device(runtime.device, ro.query_ids[idx], ro.query_mask[idx], ro.response_ids[idx], mask)
            logprobs, _ = forward_in_micro_batches(
                plain, *args, cfg.sampling, micro_batch_size=cfg.micro_batch_size, with_values=False
            )
            _, ps = policy_loss(
                logprobs.cpu(), exp.old_logprobs[idx], exp.advantages[idx], mask, cfg.cliprange, n_tokens
            )
            total += float(ps["approx_kl"])
    return float(all_reduce_sum(total)[0])


SCALE_TARGET, MAX_SCALINGS = 0.5, 4  # a scaled first update aims at half the bound, checked after each scaling


def pull_back(actor: Optimizer, kl: float, bound: float, kept: int, measure: Callable[[], float]) -> str:
    """Bring the policy back inside the KL bound: the step's first update is scaled by sqrt(SCALE_TARGET * bound / kl)
    (KL grows about as the square of a short step) and ``measure()`` checks it, up to MAX_SCALINGS times, so the step
    keeps an update; a later update is undone. Returns scaled, reverted or nothing (no update to pull back)."""
    if kept == 1:
        for _ in range(MAX_SCALINGS):
            actor.scale_last(math.sqrt(SCALE_TARGET * bound / kl))
            kl = measure()
            if kl <= bound:
                return "scaled"
    return "reverted" if kept and actor.revert() else "nothing"


def ppo_update(
    runtime: Runtime,
    model,
    actor: Optimizer,
    critic: Optimizer | None,
    ro: Rollout,
    exp: Experience,
    cfg: PPOConfig,
    step: int,
    first: FirstForward | None = None,
) -> dict[str, float]:
    """PPO epochs over minibatches with the KL early stop (``first``: the first minibatch's forward, already run)."""
    local_pos = {g: i for i, g in enumerate(ro.global_index)}
    train_actor = step >= cfg.critic_warmup_steps
    bound = cfg.max_approx_kl if train_actor else None  # None: the early stop cannot fire
    actor.commit()  # the previous step's last update is final: this step's early stop may only undo its own
    history: list[dict[str, float]] = []
    norms: dict[str, list[float]] = {"actor": [], "critic": []}
    pulled, last_rows = None, []
    for epoch in range(cfg.ppo_epochs):
        for k, rows in enumerate(_minibatches(cfg, step, epoch, local_pos)):
            stats = minibatch_grads(runtime, model, ro, exp, rows, cfg, first if epoch == k == 0 else None)
            history.append(stats)
            if bound is not None and stats["approx_kl"] > bound:  # the previous update crossed the bound
                measure = functools.partial(approx_kl_now, runtime, model, ro, exp, rows, cfg)
                pulled = pull_back(actor, stats["approx_kl"], bound, len(norms["actor"]), measure)
                break
            j = epoch * cfg.minibatches + k
            if train_actor:
                norms["actor"].append(actor.step(step, j))
            if critic is not None:
                norms["critic"].append(critic.step(step, j))
            last_rows = rows
        if pulled:
            break
    if bound is not None and not pulled and norms["actor"]:  # the last update's check: one more forward
        measure = functools.partial(approx_kl_now, runtime, model, ro, exp, last_rows, cfg)
        kl = measure()
        pulled = pull_back(actor, kl, bound, len(norms["actor"]), measure) if kl > bound else None
    out = _update_metrics(history, pulled=pulled, train_actor=train_actor)
    out["ppo/updates"] = float(len(norms["actor"]) - (pulled == "reverted"))
    out["lr/actor"] = actor.learning_rate(step)
    return out | _grad_metrics(norms, cfg)


def _update_metrics(history: list[dict[str, float]], *, pulled: str | None, train_actor: bool) -> dict:
    """Minibatch statistics averaged over the update (and the first minibatch's, which sees the rollout policy)."""
    mean = {k: sum(h[k] for h in history) / len(history) for k in MINIBATCH_STATS}
    return {
        "loss/policy": mean["policy"],
        "loss/value": mean["value"],
        "ppo/clipfrac": mean["clipfrac"],
        "ppo/approx_kl": mean["approx_kl"],
        "ppo/ratio": mean["ratio"],
        "ppo/first_ratio": history[0]["ratio"],
        "ppo/first_approx_kl": history[0]["approx_kl"],
        "ppo/early_stopped": float(pulled is not None),
        "ppo/reverted": float(pulled == "reverted"),
        "ppo/scaled": float(pulled == "scaled"),
        "ppo/critic_only": float(not train_actor),
        "value/clipfrac": mean["vf_clipfrac"],
    }


def _grad_metrics(norms: dict[str, list[float]], cfg: PPOConfig) -> dict[str, float]:
    """Mean gradient norm before clipping, and the share of updates that clipped, per optimizer that stepped."""
    out = {}
    for name in ("actor", "critic"):  # each clipped on its own at max_grad_norm
        if norms[name]:
            out[f"grad/{name}_norm"] = sum(norms[name]) / len(norms[name])
            out[f"grad/{name}_clipped"] = sum(n > cfg.max_grad_norm for n in norms[name]) / len(norms[name])
    return out
