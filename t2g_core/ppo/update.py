"""The PPO update, step 7 of a PPO step: epochs over global minibatches, each a forward and backward with the
clipped policy loss and (with a critic) ``vf_coef`` times the clipped value loss, token means over the global
minibatch.

Early stop: before each actor update the minibatch's forward measures the global approximate KL(old || current);
above ``max_approx_kl`` the previous actor update (the one that crossed it) is reverted and the batch stops, and after
the last update one more forward checks it, so no update that breaks the bound survives. The first
``critic_warmup_steps`` steps train the critic alone.
"""

from __future__ import annotations

import math

import torch

from t2g_core.config.ppo import PPOConfig
from t2g_core.ppo.distributed import Runtime, all_reduce_sum, global_sum, to_device
from t2g_core.ppo.experience import Experience, uses_critic
from t2g_core.ppo.models import forward_in_micro_batches
from t2g_core.ppo.optimizer import Optimizer
from t2g_core.ppo.rollout import Rollout
from t2g_core.ppo.sampling import sample_seed
from t2g_core.rl import policy_loss, value_loss


def _minibatches(cfg: PPOConfig, step: int, epoch: int, local_pos: dict[int, int]) -> list[list[int]]:
    """Local row numbers of each global minibatch (the same split however many processes share the batch)."""
    perm = torch.randperm(
        cfg.batch_size, generator=torch.Generator().manual_seed(sample_seed(cfg.seed + 1, step, epoch))
    )
    size = cfg.batch_size // cfg.minibatches
    groups = [perm[i * size : (i + 1) * size].tolist() for i in range(cfg.minibatches)]
    return [[local_pos[g] for g in group if g in local_pos] for group in groups]


def _chunks(rows: list[int], n: int) -> list[list[int]]:
    size = math.ceil(len(rows) / n) if rows else 0
    return [rows[i : i + size] for i in range(0, len(rows), size)] if rows else []


MINIBATCH_STATS = ("policy", "value", "clipfrac", "approx_kl", "ratio", "vf_clipfrac")


def minibatch_grads(runtime: Runtime, model, ro: Rollout, exp: Experience, rows: list[int], cfg: PPOConfig):
    """Forward and backward of one global minibatch (gradients left in the parameters, averaged over processes by
    DDP / FSDP); returns its global statistics. ``approx_kl`` is that of the policy *before* this minibatch's
    update."""
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
            logprobs, values = model(
                *to_device(runtime.device, ro.query_ids[idx], ro.query_mask[idx], ro.response_ids[idx], mask),
                cfg.sampling,
                with_values=critic,
            )
            logprobs = logprobs.cpu()
            pl, ps = policy_loss(logprobs, exp.old_logprobs[idx], exp.advantages[idx], mask, cfg.cliprange, n_tokens)
            loss, vl, vs = pl, torch.zeros(()), {"vf_clipfrac": torch.zeros(())}
            if critic:
                values = values.float().cpu()
                vl, vs = value_loss(values, exp.values[idx], exp.returns[idx], mask, cfg.cliprange_value, n_tokens)
                loss = pl + cfg.vf_coef * vl
            runtime.backward(weight * loss)
        stats = [pl.detach(), vl.detach(), ps["clipfrac"], ps["approx_kl"], ps["ratio"], vs["vf_clipfrac"]]
        sums += weight * torch.stack(stats).to(torch.float64)
    return dict(zip(MINIBATCH_STATS, all_reduce_sum(sums).tolist(), strict=True))


@torch.no_grad()
def approx_kl_now(runtime: Runtime, model, ro: Rollout, exp: Experience, rows: list[int], cfg: PPOConfig) -> float:
    """Global approximate KL(old || current policy) over one minibatch (the early stop's last check; every process
    calls it, rows or not)."""
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


def ppo_update(
    runtime: Runtime,
    model,
    actor: Optimizer,
    critic: Optimizer | None,
    ro: Rollout,
    exp: Experience,
    cfg: PPOConfig,
    step: int,
) -> dict[str, float]:
    """PPO epochs over minibatches with the early stop that reverts the update crossing ``max_approx_kl``."""
    local_pos = {g: i for i, g in enumerate(ro.global_index)}
    train_actor = step >= cfg.critic_warmup_steps
    actor.commit()  # the previous step's last update is final: this step's early stop may only undo its own
    history: list[dict[str, float]] = []
    norms: dict[str, list[float]] = {"actor": [], "critic": []}
    stopped = reverted = False
    last_rows: list[int] = []
    for epoch in range(cfg.ppo_epochs):
        for k, rows in enumerate(_minibatches(cfg, step, epoch, local_pos)):
            stats = minibatch_grads(runtime, model, ro, exp, rows, cfg)
            history.append(stats)
            if train_actor and stats["approx_kl"] > cfg.max_approx_kl:
                stopped, reverted = True, actor.revert()
                break
            j = epoch * cfg.minibatches + k
            if train_actor:
                norms["actor"].append(actor.step(step, j))
            if critic is not None:
                norms["critic"].append(critic.step(step, j))
            last_rows = rows
        if stopped:
            break
    if train_actor and not stopped and approx_kl_now(runtime, model, ro, exp, last_rows, cfg) > cfg.max_approx_kl:
        stopped, reverted = True, actor.revert()
    out = _update_metrics(history, stopped=stopped, reverted=reverted, train_actor=train_actor)
    out["ppo/updates"] = float(len(norms["actor"]) - reverted)
    out["lr/actor"] = actor.learning_rate(step)
    return out | _grad_metrics(norms, cfg)


def _update_metrics(history: list[dict[str, float]], *, stopped: bool, reverted: bool, train_actor: bool) -> dict:
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
        "ppo/early_stopped": float(stopped),
        "ppo/reverted": float(reverted),
        "ppo/critic_only": float(not train_actor),
        "value/clipfrac": mean["vf_clipfrac"],
    }


def _grad_metrics(norms: dict[str, list[float]], cfg: PPOConfig) -> dict[str, float]:
    """Mean gradient norm before clipping, and the share of updates that clipped, per optimizer that stepped."""
    out = {}
    for name, limit in (("actor", cfg.max_grad_norm), ("critic", cfg.value_max_grad_norm)):
        if norms[name]:
            out[f"grad/{name}_norm"] = sum(norms[name]) / len(norms[name])
            out[f"grad/{name}_clipped"] = sum(n > limit for n in norms[name]) / len(norms[name])
    return out
