"""Span-reward PPO: one step = rollout -> score -> place span rewards -> KL -> GAE -> whiten -> update.

Per response token t (mask m_t true up to and including EOS):

    d_t = delta_t + o_t                                     span (or word) labels plus omission labels
    r_t = m_t (s_t - beta KL_t) + [t = last] terminal      s_t = d_t placed by the reward mode (t2g_core.rl.rewards)
    A, R = estimator(r, V, s)  (gae by default);  A <- whiten(A) over valid tokens of the *global* batch
    actor:  L_clip(pi)          critic: vf_coef * L_clip(V)    token means over each global minibatch

Actor and critic have their own optimizer, gradient clip and learning-rate schedule; the first
``critic_warmup_steps`` steps train the critic alone; critic-free estimators (rloo, grpo) train no critic and draw
``group_size`` samples per prompt.

Deliberate choices (see ``../shared/reference/rlhf_anchors.md`` §5): sampled ids are trained as-is (no decode /
re-encode); temperature divides the logits in every log-prob recomputation; positions come from the attention mask
in every forward; the reference is the base with the LoRA adapter disabled; a failed critique gets
``parse_failure_reward`` as a terminal reward and is counted, never skipping the step. Early stop: before each actor
update the minibatch's forward measures the global approximate KL(old || current); above ``max_approx_kl`` the
previous actor update (the one that crossed it) is reverted and the batch stops, and after the last update one more
forward checks it, so no update that breaks the bound survives. The learning rates decay with training progress
(step, planned update), not with the count of updates taken, so skipped updates never leave an arm's rate higher.
Randomness is keyed by (seed, step, global index), so a run split over processes, or resumed from a checkpoint,
reproduces the single uninterrupted run (with the ``exact`` generation backend; ``hf`` and ``vllm`` are reproducible
for the same process count).

Devices and processes go through ``accelerate`` (:class:`~t2g_core.ppo.distributed.Runtime`): the model runs on the
accelerator's device, bookkeeping tensors (rewards, advantages, masks) stay on the CPU, and gradients are
all-reduced by DDP (or FSDP) in the backward pass. The old-log-prob, reference and value passes run in micro-batches
(``micro_batch_size``) and no pass builds the (B, T, V) logits (``rl.logprobs.selective_logprobs``).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor

from t2g_core.config.align import AlignConfig
from t2g_core.config.ppo import CRITIC_FREE, HYBRID_MODES, WORD_LABEL_MODES, PPOConfig
from t2g_core.ppo import checkpoint as ckpt
from t2g_core.ppo.distributed import Runtime, all_reduce_sum, barrier, global_sum
from t2g_core.ppo.generation import make_backend, stream_seed
from t2g_core.ppo.models import forward_in_micro_batches, load_policy
from t2g_core.ppo.report import write_heatmap, write_rollouts
from t2g_core.ppo.sampling import response_mask_after_eos, sample_seed
from t2g_core.ppo.scoring import RewardSource, ScoredResponse, decode_responses, label_responses
from t2g_core.progress import Progress, no_progress
from t2g_core.rl import (
    assemble_rewards,
    estimate_advantages,
    explained_variance,
    make_kl_controller,
    masked_whiten,
    omission_labels,
    per_token_kl,
    policy_loss,
    task_rewards,
    unit_label_sums,
    value_loss,
)
from t2g_core.spans import ParsedFeedback
from t2g_core.tracking import NullTracker, Tracker

# (rows, responses) -> per-sample task error, or {name: per-sample values} logged as task/<name> and eval/task_<name>
TaskMetric = Callable[[list[dict], list[str]], "list[float] | dict[str, list[float]]"]
# (query_ids, query_mask, per-sample seeds, step) -> response ids (B, T)
Generate = Callable[[Tensor, Tensor, list[int], int], Tensor]
EVAL_STEP_KEY = 10**9  # eval samples use fixed streams, the same at every evaluation


@dataclass
class PPOResult:
    run_dir: Path
    adapter_dir: Path
    history: list[dict] = field(default_factory=list)
    rollouts_path: Path | None = None
    heatmaps: list[Path] = field(default_factory=list)
    steps_done: int = 0


@dataclass
class Rollout:
    """One step's local share of the global batch; tensors are (B_local, ...)."""

    rows: list[dict]
    global_index: list[int]
    query_ids: Tensor
    query_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    has_eos: Tensor
    group: Tensor | None = None  # (B_local,) the prompt of each sample, numbered locally (group baselines)


@dataclass
class Experience:
    old_logprobs: Tensor
    values: Tensor
    advantages: Tensor
    returns: Tensor


# --------------------------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------------------------


def batch_rows(step: int, n_prompts: int, batch_size: int, seed: int, group_size: int = 1) -> list[int]:
    """Row numbers of step ``step``'s global batch: consecutive slices of a fresh permutation per pass over the data,
    each prompt repeated ``group_size`` times in a row (global index g holds prompt g // group_size of the step)."""
    n = batch_size // group_size
    out = []
    for pos in range(step * n, (step + 1) * n):
        data_epoch, offset = divmod(pos, n_prompts)
        perm = torch.randperm(n_prompts, generator=torch.Generator().manual_seed(seed * 7919 + data_epoch))
        out += [int(perm[offset])] * group_size
    return out


def _row_dict(row: pd.Series) -> dict:
    d = row.to_dict()
    meta = d.get("meta")
    if isinstance(meta, str):
        d["meta"] = json.loads(meta)
    return d


def _render(tokenizer, rows: list[dict]) -> list[str]:
    from t2g_core.policy_prompts import render_policy_prompt

    return [render_policy_prompt(tokenizer, row["task"], row["prompt"]) for row in rows]


# --------------------------------------------------------------------------------------------------------------
# 1. rollout
# --------------------------------------------------------------------------------------------------------------


def rollout(generate: Generate, tok, rows: list[dict], global_index: list[int], cfg: PPOConfig, step: int) -> Rollout:
    """Render and left-pad the prompts, sample a response each (tensors come back on the CPU); samples of one prompt
    (global index // group_size) share a local group id."""
    enc = tok(_render(tok, rows), add_special_tokens=False, padding=True, return_tensors="pt")
    seeds = [sample_seed(cfg.seed, step, g) for g in global_index]
    response_ids = generate(enc["input_ids"], enc["attention_mask"], seeds, step).cpu()
    response_mask, has_eos = response_mask_after_eos(response_ids, tok.eos_token_id)
    prompts = [g // cfg.group_size for g in global_index]
    group = torch.tensor([sorted(set(prompts)).index(p) for p in prompts], dtype=torch.long)
    return Rollout(
        rows, global_index, enc["input_ids"], enc["attention_mask"].bool(), response_ids, response_mask, has_eos, group
    )


# --------------------------------------------------------------------------------------------------------------
# 2. score, 3. place span rewards
# --------------------------------------------------------------------------------------------------------------


def decode(ro: Rollout, tokenizer) -> list[tuple[str, list[tuple[int, int]]]]:
    """Each response's text and the char offsets of its sampled ids (no re-encoding)."""
    ids = [r[m].tolist() for r, m in zip(ro.response_ids, ro.response_mask, strict=True)]
    return decode_responses(ids, tokenizer, tokenizer.eos_token_id)


def critique(ro: Rollout, decoded, reward_source: RewardSource) -> list[ParsedFeedback]:
    return reward_source.critique_batch(
        [{**row, "response": text} for row, (text, _) in zip(ro.rows, decoded, strict=True)]
    )


def score(
    ro: Rollout, reward_source: RewardSource, tokenizer, align_cfg: AlignConfig | None, *, words: bool = False
) -> list[ScoredResponse]:
    """decode -> critique -> label (the three parts, timed separately in :meth:`PPOTrainer.step`)."""
    decoded = decode(ro, tokenizer)
    return label_responses(decoded, critique(ro, decoded, reward_source), align_cfg, words=words)


def labels_tensor(scored: list[ScoredResponse], shape: tuple[int, int]) -> Tensor:  # -> (B, T) delta_t
    out = torch.zeros(shape, dtype=torch.float32)
    for b, s in enumerate(scored):
        out[b, : len(s.labels)] = torch.tensor(s.labels, dtype=torch.float32)
    return out


def missing_tensor(scored: list[ScoredResponse], shape: tuple[int, int]) -> Tensor:  # -> (B, T) items per token
    """How many missing items each sampled token is the anchor of."""
    out = torch.zeros(shape, dtype=torch.float32)
    for b, s in enumerate(scored):
        for k in s.missing_tokens:
            out[b, min(k, shape[1] - 1)] += 1.0
    return out


def place_task_rewards(scored: list[ScoredResponse], ro: Rollout, cfg: PPOConfig) -> tuple[Tensor, Tensor, Tensor]:
    """Task reward s_t (B, T), terminal reward (B,), and the labels delta (B, T) after failure handling.

    s_t places d_t = delta_t + o_t (token labels plus omission labels, see :func:`t2g_core.rl.omission_labels`); a
    critic's verdict scales the labels to unit sums and joins the terminal, and a degenerate response gets
    ``degenerate_reward`` alone (the order in :mod:`t2g_core.rl.rewards`).
    """
    mask = ro.response_mask
    fbs = [s.feedback for s in scored]
    labels = labels_tensor(scored, tuple(mask.shape))
    omitted = omission_labels(
        missing_tensor(scored, tuple(mask.shape)), mask, cfg.omission_penalty, cfg.omission_placement
    )
    failed = torch.tensor([not fb.ok for fb in fbs])
    has_verdict = torch.tensor([fb.ok and fb.outcome is not None for fb in fbs])
    verdict = torch.tensor([float(fb.outcome) if fb.ok and fb.outcome is not None else 0.0 for fb in fbs])
    degenerate = torch.tensor([fb.ok and fb.degenerate for fb in fbs])
    labels = torch.where(has_verdict[:, None], unit_label_sums(labels, mask), labels)
    no_eos = ~ro.has_eos if cfg.missing_eos_penalty is not None else torch.zeros_like(failed)
    keep = (~(failed | no_eos | degenerate)).to(labels.dtype)
    labels, signal = labels * keep[:, None], (labels + omitted) * keep[:, None]
    task = task_rewards(cfg.reward_mode, signal, mask, cfg.span_coef)
    hybrid = cfg.terminal_coef if cfg.reward_mode in HYBRID_MODES else 0.0  # scalar/uniform: already the reward
    terminal = hybrid * cfg.span_coef * (signal * mask).sum(dim=1) + cfg.outcome_coef * verdict * keep
    terminal = torch.where(failed, torch.full_like(terminal, cfg.parse_failure_reward), terminal)
    if cfg.missing_eos_penalty is not None:
        terminal = torch.where(no_eos & ~failed, torch.full_like(terminal, cfg.missing_eos_penalty), terminal)
    return task, torch.where(degenerate, torch.full_like(terminal, cfg.degenerate_reward), terminal), labels


# --------------------------------------------------------------------------------------------------------------
# 4. KL, 5. GAE, 6. whiten
# --------------------------------------------------------------------------------------------------------------


def _on(device, *tensors: Tensor) -> list[Tensor]:
    return [t.to(device) for t in tensors]


def uses_critic(cfg: PPOConfig) -> bool:
    return cfg.advantage not in CRITIC_FREE


@torch.no_grad()
def old_ref_values(model, ro: Rollout, cfg: PPOConfig, device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Old log-probs, reference log-probs, values (0 without a critic) and the sampling entropy, all (B, T) on the
    CPU, ``cfg.micro_batch_size`` rows per forward."""
    args = (*_on(device, ro.query_ids, ro.query_mask, ro.response_ids, ro.response_mask), cfg.temperature)
    size = cfg.micro_batch_size
    old_logprobs, values, entropy = forward_in_micro_batches(
        model, *args, micro_batch_size=size, with_values=uses_critic(cfg), with_entropy=True
    )
    ref_logprobs, _ = forward_in_micro_batches(model, *args, micro_batch_size=size, reference=True)
    m = ro.response_mask.float()
    values = torch.zeros_like(m) if values is None else values.float().cpu()
    return old_logprobs.cpu() * m, ref_logprobs.cpu() * m, values * m, entropy.cpu() * m


def advantages_and_returns(
    rewards: Tensor, values: Tensor, mask: Tensor, task: Tensor, group: Tensor | None, cfg: PPOConfig
) -> tuple[Tensor, Tensor]:
    """The configured estimator's advantages, whitened over the global batch, and the critic's returns."""
    advantages, returns = estimate_advantages(
        cfg.advantage, rewards, values, mask, task=task, group=group, gamma=cfg.gamma, lam=cfg.lam
    )
    return masked_whiten(advantages, mask, reduce=all_reduce_sum), returns


# --------------------------------------------------------------------------------------------------------------
# 7. update
# --------------------------------------------------------------------------------------------------------------


def lr_factor(cfg: PPOConfig, *, actor: bool = True):
    """Multiplier of a learning rate at PPO step ``step``, planned update ``j`` of that step (0-based, of
    ``ppo_epochs x minibatches``), after ``taken`` optimizer updates: linear warm-up over the updates actually
    taken, then constant or a linear decay with training progress (the actor's progress starts after the critic
    warm-up). Updates skipped by the early stop do not move the decay, so every arm's rate follows the same path."""
    warm = max(cfg.warmup_steps, 1)
    first = cfg.critic_warmup_steps if actor else 0
    per_step = cfg.ppo_epochs * cfg.minibatches

    def factor(step: int, j: int, taken: int) -> float:
        progress = (step - first + j / per_step) / max(cfg.steps - first, 1)
        decay = max(0.0, 1.0 - progress) if cfg.lr_schedule == "linear" else 1.0
        return min(1.0, (taken + 1) / warm) * decay

    return factor


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
                *_on(runtime.device, ro.query_ids[idx], ro.query_mask[idx], ro.response_ids[idx], mask),
                cfg.temperature,
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
            args = _on(runtime.device, ro.query_ids[idx], ro.query_mask[idx], ro.response_ids[idx], mask)
            logprobs, _ = forward_in_micro_batches(
                plain, *args, cfg.temperature, micro_batch_size=cfg.micro_batch_size, with_values=False
            )
            _, ps = policy_loss(
                logprobs.cpu(), exp.old_logprobs[idx], exp.advantages[idx], mask, cfg.cliprange, n_tokens
            )
            total += float(ps["approx_kl"])
    return float(all_reduce_sum(total)[0])


def clip_grads(params: list[torch.nn.Parameter], max_norm: float, sharded: bool) -> float:
    """Scale the gradients of ``params`` to a global norm of at most ``max_norm``; returns the norm before clipping.
    ``sharded`` (FSDP): each process holds a shard of every gradient, so the squared norms are summed over them."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    if sharded:
        norm = all_reduce_sum(norm.double().pow(2)).sqrt()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return float(norm)


class Optimizer:
    """One model's AdamW with its own gradient clip and learning-rate schedule; can snapshot and revert a step."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float, max_grad_norm: float, factor):
        self.params, self.base_lr, self.max_grad_norm, self.factor = params, lr, max_grad_norm, factor
        self.opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        self.taken = 0  # updates applied (warm-up counts these)
        self.sharded = False  # set when FSDP shards the parameters (the clip's norm is then summed over processes)
        self._snapshot = None

    def step(self, step: int, j: int) -> float:
        """Clip, set the scheduled rate, update; returns the gradient norm before clipping."""
        norm = clip_grads(self.params, self.max_grad_norm, self.sharded)
        self._snapshot = ([p.detach().clone() for p in self.params], copy.deepcopy(self.opt.state_dict()), self.taken)
        for group in self.opt.param_groups:
            group["lr"] = self.base_lr * self.factor(step, j, self.taken)
        self.opt.step()
        self.taken += 1
        return norm

    def revert(self) -> bool:
        """Undo the last :meth:`step` (parameters, moments, warm-up count); False when there is none to undo."""
        if self._snapshot is None:
            return False
        saved, state, taken = self._snapshot
        with torch.no_grad():
            for p, s in zip(self.params, saved, strict=True):
                p.copy_(s)
        self.opt.load_state_dict(state)
        self.taken, self._snapshot = taken, None
        return True

    def state_dict(self, runtime: Runtime, model) -> dict:
        return {"opt": runtime.optimizer_state(model, self.opt), "taken": self.taken}

    def load_state_dict(self, runtime: Runtime, model, state: dict) -> None:
        runtime.load_optimizer_state(model, self.opt, state["opt"])
        self.taken = int(state["taken"])


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
    actor._snapshot = None
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
    mean = {k: sum(h[k] for h in history) / len(history) for k in MINIBATCH_STATS}
    out = {
        "loss/policy": mean["policy"],
        "loss/value": mean["value"],
        "ppo/clipfrac": mean["clipfrac"],
        "ppo/approx_kl": mean["approx_kl"],
        "ppo/ratio": mean["ratio"],
        "ppo/first_ratio": history[0]["ratio"],
        "ppo/first_approx_kl": history[0]["approx_kl"],
        "ppo/early_stopped": float(stopped),
        "ppo/reverted": float(reverted),
        "ppo/updates": float(len(norms["actor"]) - reverted),
        "ppo/critic_only": float(not train_actor),
        "value/clipfrac": mean["vf_clipfrac"],
        "lr/actor": actor.base_lr * actor.factor(step, 0, actor.taken),
    }
    for name, limit in (("actor", cfg.max_grad_norm), ("critic", cfg.value_max_grad_norm)):
        if norms[name]:
            out[f"grad/{name}_norm"] = sum(norms[name]) / len(norms[name])
            out[f"grad/{name}_clipped"] = sum(n > limit for n in norms[name]) / len(norms[name])
    return out


# --------------------------------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------------------------------


class PPOTrainer:
    """Holds the models, optimizer and controller; :meth:`step` runs one numbered PPO step."""

    def __init__(
        self,
        cfg: PPOConfig,
        policy_dir: str | Path,
        prompts_df: pd.DataFrame,
        run_dir: str | Path,
        *,
        reward_source: RewardSource,
        align_cfg: AlignConfig | None = None,
        task_metric: TaskMetric | None = None,
        dtype: str = "auto",
    ):
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.runtime = Runtime()
        self.rank, self.world = self.runtime.rank, self.runtime.world
        if cfg.batch_size % cfg.minibatches:
            raise ValueError(f"batch_size {cfg.batch_size} must divide by minibatches {cfg.minibatches}")
        if len(prompts_df) == 0:
            raise ValueError("no prompts to train on")
        self.prompts = prompts_df.reset_index(drop=True)
        self.reward_source, self.align_cfg, self.task_metric = reward_source, align_cfg, task_metric
        if cfg.batch_size // cfg.group_size < self.world:  # processes may hold unequal shares, never none
            raise ValueError(
                f"the {cfg.batch_size // cfg.group_size} prompts of a batch (batch_size / group_size) are fewer than "
                f"the process count {self.world}: every process needs a prompt (a prompt's samples stay on one)"
            )
        self.bundle = load_policy(
            policy_dir,
            lora_r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            target_modules=cfg.lora_target_modules,
            value_model=cfg.value_model if uses_critic(cfg) else "head",  # critic-free: no value backbone to load
            seed=cfg.seed,
            dtype=dtype,
            device=self.runtime.device,
            chunk_tokens=cfg.logprob_chunk_tokens,
            gradient_checkpointing=cfg.gradient_checkpointing,
        )
        if not uses_critic(cfg):
            self.bundle.value.requires_grad_(False)  # critic-free: nothing trains the value head
        policy_params, value_params = self.bundle.trainable_parameters()
        self.actor = Optimizer(policy_params, cfg.learning_rate, cfg.max_grad_norm, lr_factor(cfg))
        self.critic = (
            Optimizer(value_params, cfg.value_learning_rate, cfg.value_max_grad_norm, lr_factor(cfg, actor=False))
            if uses_critic(cfg)
            else None
        )
        optimizers = [o for o in (self.actor, self.critic) if o is not None]
        self.model, *prepared = self.runtime.prepare(self.bundle.model, *(o.opt for o in optimizers))  # DDP / FSDP
        for o, opt in zip(optimizers, prepared, strict=True):
            o.opt, o.sharded = opt, self.runtime.fsdp
            o.params = [p for group in opt.param_groups for p in group["params"]]
        self.backend = make_backend(
            cfg, self.bundle.tokenizer, model_ref=policy_dir, dtype=dtype, workdir=self.run_dir, rank=self.rank
        )
        self.kl_ctl = make_kl_controller(cfg.kl_coef, cfg.adaptive_kl, cfg.target_kl, cfg.kl_horizon)
        self.history: list[dict] = []
        self.records: list[dict] = []
        self.heatmaps: list[Path] = []
        self.next_step = 0

    # ---- one step -------------------------------------------------------------------------------------------
    def local_rows(self, step: int) -> tuple[list[dict], list[int]]:
        """This process's rows of the global batch; the samples of one prompt stay together (group baselines)."""
        k = self.cfg.group_size
        rows = batch_rows(step, len(self.prompts), self.cfg.batch_size, self.cfg.seed, k)
        mine = [g for g in range(self.cfg.batch_size) if (g // k) % self.world == self.rank]
        return [_row_dict(self.prompts.iloc[rows[g]]) for g in mine], mine

    def generate(self, query_ids: Tensor, query_mask: Tensor, seeds: list[int], step: int) -> Tensor:
        """Responses from the current policy through the generation backend (on the device)."""
        with self.runtime.gathered(self.model) as model:
            return self.backend.generate(
                model.causal_lm,
                *_on(self.runtime.device, query_ids, query_mask),
                seeds,
                stream_seed(self.cfg.seed, step, self.rank),
            )

    def step(self, step: int) -> dict[str, float]:
        cfg, t0 = self.cfg, time.perf_counter()
        rows, global_index = self.local_rows(step)
        self.backend.sync(self.bundle.policy)
        ro = rollout(self.generate, self.bundle.tokenizer, rows, global_index, cfg, step)  # 1. rollout
        t1 = time.perf_counter()
        decoded = decode(ro, self.bundle.tokenizer)
        ta = time.perf_counter()
        feedback = critique(ro, decoded, self.reward_source)  # 2. score
        tb = time.perf_counter()
        words = cfg.reward_mode in WORD_LABEL_MODES
        scored = label_responses(decoded, feedback, self.align_cfg, words=words)  # 3a. labels on the sampled ids
        t2 = time.perf_counter()
        with self.runtime.gathered(self.model) as model:
            old_logprobs, ref_logprobs, values, entropy = old_ref_values(model, ro, cfg, self.runtime.device)
        t3 = time.perf_counter()
        task, terminal, labels = place_task_rewards(scored, ro, cfg)  # 3b. place span (and omission) rewards
        kl = per_token_kl(old_logprobs, ref_logprobs, ro.response_mask, cfg.kl_estimator)  # 4. KL
        rewards = assemble_rewards(task, kl, ro.response_mask, self.kl_ctl.value, terminal)
        advantages, returns = advantages_and_returns(  # 5. advantages (GAE or another estimator), 6. whiten
            rewards, values, ro.response_mask, task, ro.group, cfg
        )
        t4 = time.perf_counter()
        exp = Experience(old_logprobs, values, advantages, returns)
        metrics = ppo_update(self.runtime, self.model, self.actor, self.critic, ro, exp, cfg, step)  # 7. update
        t5 = time.perf_counter()
        metrics |= self.step_metrics(ro, scored, labels, kl, rewards)
        metrics |= self.critic_metrics(ro, entropy, values, returns)
        metrics |= {
            "time/rollout": t1 - t0,
            "time/score": tb - ta,
            "time/span_labels": (ta - t1) + (t2 - tb),
            "time/forward": t3 - t2,
            "time/rewards": t4 - t3,
            "time/step": t5 - t0,
            "time/update": t5 - t4,
            "kl/beta": self.kl_ctl.value,
        }
        self.kl_ctl.update(metrics["kl/mean"], cfg.batch_size)  # 8. adapt beta
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            self.record(step, ro, scored, task, terminal, kl, rewards)
        return metrics

    # ---- metrics and artifacts ----------------------------------------------------------------------------
    def step_metrics(self, ro: Rollout, scored, labels: Tensor, kl: Tensor, rewards: Tensor) -> dict[str, float]:
        m = ro.response_mask.float()
        local = [
            float(len(scored)),
            float(m.sum()),
            float((labels * m).sum()),
            float(((labels > 0) * m).sum()),
            float(((labels < 0) * m).sum()),
            float((kl * m).sum()),
            float(rewards.sum()),
            float(sum(not s.feedback.ok for s in scored)),
            float(ro.has_eos.sum()),
            float(sum(s.n_spans for s in scored)),
            float(sum(s.n_unmatched for s in scored)),
            float(sum(len(s.missing_tokens) for s in scored if s.feedback.ok)),
        ]
        n, tokens, span_sum, pos, neg, kl_sum, r_sum, failed, eos, spans, unmatched, missing = global_sum(local)
        out = {
            "reward/span_mean": span_sum / n,
            "reward/total_mean": r_sum / n,
            "reward/positive_frac": pos / tokens,
            "reward/negative_frac": neg / tokens,
            "reward/missing_mean": missing / n,
            "kl/mean": kl_sum / n,
            "kl/per_token": kl_sum / tokens,
            "parse/failure_rate": failed / n,
            "eos/rate": eos / n,
            "response/length": tokens / n,
            "spans/unmatched_rate": unmatched / spans if spans else 0.0,
        }
        return out | self.task_metrics(ro.rows, [s.text for s in scored], "task/")

    def critic_metrics(self, ro: Rollout, entropy: Tensor, values: Tensor, returns: Tensor) -> dict[str, float]:
        """Sampling entropy per token, and the critic's explained variance on this batch (before its update)."""
        m = ro.response_mask.float()
        entropy_sum, tokens = global_sum([float((entropy * m).sum()), float(m.sum())])
        out = {"policy/entropy": entropy_sum / tokens}
        if uses_critic(self.cfg):
            out["value/explained_variance"] = explained_variance(values, returns, ro.response_mask, all_reduce_sum)
        return out

    def record(
        self, step: int, ro: Rollout, scored, task: Tensor, terminal: Tensor, kl: Tensor, rewards: Tensor
    ) -> None:
        samples = []
        for b, s in enumerate(scored):
            n = len(s.labels)
            token_task = task[b, :n].clone()
            if n:
                token_task[n - 1] += terminal[b]
            fb = s.feedback
            self.records.append(
                {
                    "step": step,
                    "id": str(ro.rows[b]["id"]),
                    "prompt": ro.rows[b]["prompt"],
                    "response": s.text,
                    "critique": fb.critique,
                    "good_spans": list(fb.good_spans),
                    "poor_spans": list(fb.poor_spans),
                    "token_rewards": rewards[b, :n].tolist(),
                    "reward": float(rewards[b].sum()),
                    "kl": float(kl[b].sum()),
                }
            )
            samples.append(
                {
                    "prompt": ro.rows[b]["prompt"],
                    "text": s.text,
                    "offsets": s.offsets,
                    "rewards": token_task.tolist(),
                    "critique": fb.critique,
                    "status": fb.status,
                    "error": fb.error,
                }
            )
        if self.rank == 0 and self.cfg.heatmap_samples:
            path = write_heatmap(
                self.run_dir / "heatmaps" / f"step-{step:06d}.html", step, samples[: self.cfg.heatmap_samples]
            )
            self.heatmaps.append(path)

    # ---- checkpoints --------------------------------------------------------------------------------------
    def save(self) -> Path:
        actor_state = self.actor.state_dict(self.runtime, self.model)
        critic_state = self.critic.state_dict(self.runtime, self.model) if self.critic is not None else None
        with self.runtime.gathered(self.model):  # every process: FSDP gathers the weights rank 0 writes
            return self._save(actor_state, critic_state)

    def _save(self, actor_state: dict, critic_state: dict | None) -> Path:
        state = {
            "step": self.next_step,
            "value": self.bundle.value.state_dict(),
            "actor_optimizer": actor_state,
            "critic_optimizer": critic_state,
            "kl": self.kl_ctl.state_dict(),
            "history": self.history,
            "records": self.records,
            "config": self.cfg.model_dump(mode="json"),
        }
        return ckpt.save_checkpoint(
            self.run_dir,
            self.next_step,
            policy=self.bundle.policy,
            trainer_state=state,
            rank=self.rank,
            world=self.world,
            barrier=barrier,
        )

    def restore(self) -> bool:
        path = ckpt.latest_checkpoint(self.run_dir)
        if path is None:
            return False
        with self.runtime.gathered(self.model, writeback=True):
            state = ckpt.load_checkpoint(path, policy=self.bundle.policy, rank=self.rank)
            self.bundle.value.load_state_dict(state["value"])
        self.actor.load_state_dict(self.runtime, self.model, state["actor_optimizer"])
        if self.critic is not None:
            self.critic.load_state_dict(self.runtime, self.model, state["critic_optimizer"])
        self.kl_ctl.load_state_dict(state["kl"])
        self.history, self.records, self.next_step = state["history"], state["records"], int(state["step"])
        return True

    # ---- evaluation ---------------------------------------------------------------------------------------
    def evaluate(self, eval_df: pd.DataFrame) -> dict[str, float]:
        idx = [i for i in range(len(eval_df)) if i % self.world == self.rank]
        rows = [_row_dict(eval_df.iloc[i]) for i in idx]
        self.backend.sync(self.bundle.policy)  # the policy after this step's update
        ro = rollout(self.generate, self.bundle.tokenizer, rows, idx, self.cfg, EVAL_STEP_KEY) if rows else None
        if not rows:
            with self.runtime.gathered(self.model):  # FSDP: the gather is collective, rows or not
                pass
        scored = score(ro, self.reward_source, self.bundle.tokenizer, self.align_cfg) if ro else []
        m = ro.response_mask.float() if ro else torch.zeros(1, 1)
        labels = labels_tensor(scored, tuple(m.shape)) if ro else torch.zeros(1, 1)
        n, span_sum, neg = global_sum([float(len(rows)), float((labels * m).sum()), float(((labels < 0) * m).sum())])
        out = {"eval/span_mean": span_sum / n, "eval/negative_tokens": neg / n}
        return out | self.task_metrics(rows, [s.text for s in scored], "eval/task_")

    def task_metrics(self, rows: list[dict], texts: list[str], prefix: str) -> dict[str, float]:
        """Global means of the task metric(s); every process must call this (it all-reduces)."""
        if self.task_metric is None:
            return {}
        values = self.task_metric(rows, texts)  # also with no rows: every process must reduce the same names
        values = {"error": values} if isinstance(values, list) else values
        names = sorted(values)
        sums = global_sum([float(len(rows))] + [float(sum(values.get(k, []))) for k in names])
        return {f"{prefix}{k}": total / sums[0] for k, total in zip(names, sums[1:], strict=True)}

    # ---- run ----------------------------------------------------------------------------------------------
    def fit(
        self,
        *,
        tracker: Tracker,
        eval_df: pd.DataFrame | None = None,
        stop_after: int | None = None,
        progress: Progress = no_progress,
    ) -> PPOResult:
        """Train from ``self.next_step`` to ``cfg.steps`` (or stop early after ``stop_after`` steps, for tests);
        ``progress("ppo", step, steps, {reward, kl, ...})`` after every step (rank 0)."""
        cfg = self.cfg
        last = cfg.steps if stop_after is None else min(cfg.steps, self.next_step + stop_after)
        self.write_loaded()
        for step in range(self.next_step, last):
            metrics = self.step(step)
            if eval_df is not None and (step % cfg.eval_every == 0 or step == cfg.steps - 1):
                metrics |= self.evaluate(eval_df)
            self.history.append({"step": step, **metrics})
            self.next_step = step + 1
            if self.rank == 0:
                tracker.log_metrics(metrics, step=step)
                progress("ppo", self.next_step, cfg.steps, progress_metrics(metrics))
            if step % cfg.log_every == 0 or step == cfg.steps - 1:
                self.write_rollouts(tracker)
            if self.next_step % cfg.save_every == 0 or self.next_step == last:
                self.save()
        return self.result()

    def write_rollouts(self, tracker: Tracker) -> Path | None:
        if self.rank != 0 or not self.records:
            return None
        path = write_rollouts(self.run_dir / "rollouts.parquet", self.records)
        tracker.log_artifact(path)
        if self.heatmaps:
            tracker.log_artifact(self.heatmaps[-1])
        return path

    def write_loaded(self) -> None:
        """``models.json``: what this run loaded (name, revision, cached commit, dtype, pad token) and on what."""
        if self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            info = {
                "policy": self.bundle.loaded,
                "device": str(self.runtime.device),
                "processes": self.world,
                "distributed": self.runtime.accelerator.distributed_type.name,
                "generation_backend": self.cfg.generation_backend,
            }
            (self.run_dir / "models.json").write_text(json.dumps(info, indent=2), encoding="utf-8")

    def result(self) -> PPOResult:
        adapter = self.run_dir / "adapter"
        with self.runtime.gathered(self.model):
            if self.rank == 0:
                self.bundle.policy.save_pretrained(adapter, save_embedding_layers=False)
                (self.run_dir / "history.json").write_text(json.dumps(self.history, indent=1), encoding="utf-8")
        barrier()
        rollouts = self.run_dir / "rollouts.parquet"
        return PPOResult(
            self.run_dir, adapter, self.history, rollouts if rollouts.exists() else None, self.heatmaps, self.next_step
        )


def train(
    cfg: PPOConfig,
    policy_dir: str | Path,
    prompts_df: pd.DataFrame,
    out_dir: str | Path,
    *,
    reward_source: RewardSource,
    eval_df: pd.DataFrame | None = None,
    tracker: Tracker | None = None,
    resume: bool = False,
    align_cfg: AlignConfig | None = None,
    task_metric: TaskMetric | None = None,
    stop_after: int | None = None,
    dtype: str = "auto",
    progress: Progress = no_progress,
) -> PPOResult:
    """Train a LoRA policy with span-reward PPO; ``resume=True`` continues from ``out_dir``'s latest checkpoint.
    ``policy_dir`` is a folder or a Hub id (``@revision``); the base loads in ``dtype`` (``models.dtype``)."""
    trainer = PPOTrainer(
        cfg,
        policy_dir,
        prompts_df,
        out_dir,
        reward_source=reward_source,
        align_cfg=align_cfg,
        task_metric=task_metric,
        dtype=dtype,
    )
    if resume and not trainer.restore():
        raise FileNotFoundError(f"{out_dir}: no checkpoint to resume from (expected checkpoints/latest)")
    return trainer.fit(tracker=tracker or NullTracker(), eval_df=eval_df, stop_after=stop_after, progress=progress)


def progress_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """The few numbers a progress bar shows for a PPO step."""
    names = {"reward/total_mean": "reward", "kl/mean": "kl", "task/error": "error", "time/step": "s/step"}
    return {short: metrics[k] for k, short in names.items() if k in metrics}
