"""Span-reward PPO: one step = rollout -> score -> place span rewards -> KL -> GAE -> whiten -> update.

Per response token t (mask m_t true up to and including EOS):

    r_t = m_t (s_t - beta KL_t) + [t = last] terminal      s_t from the reward mode (t2g_core.rl.rewards)
    A, R = GAE(r, V; gamma, lam);  A <- whiten(A) over valid tokens of the *global* batch
    loss = L_clip(pi) + vf_coef * L_clip(V)                 token mean over each global minibatch

Deliberate choices (see ``../shared/reference/rlhf_anchors.md`` §5): sampled ids are trained as-is (no decode /
re-encode); temperature divides the logits in every log-prob recomputation; positions come from the attention mask
in every forward; the reference is the base with the LoRA adapter disabled; an epoch loop stops early when the
global approximate KL exceeds ``max_approx_kl``; a failed critique gets ``parse_failure_reward`` as a terminal
reward and is counted, never skipping the step. Randomness is keyed by (seed, step, global index), so a run split
over processes, or resumed from a checkpoint, reproduces the single uninterrupted run (with the ``exact``
generation backend; ``hf`` and ``vllm`` are reproducible for the same process count).

Devices and processes go through ``accelerate`` (:class:`~t2g_core.ppo.distributed.Runtime`): the model runs on the
accelerator's device, bookkeeping tensors (rewards, advantages, masks) stay on the CPU, and gradients are
all-reduced by DDP (or FSDP) in the backward pass. The old-log-prob, reference and value passes run in micro-batches
(``micro_batch_size``) and no pass builds the (B, T, V) logits (``rl.logprobs.selective_logprobs``).
"""

from __future__ import annotations

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
from t2g_core.config.ppo import PPOConfig
from t2g_core.ppo import checkpoint as ckpt
from t2g_core.ppo.distributed import Runtime, all_reduce_sum, barrier, global_sum
from t2g_core.ppo.generation import make_backend, stream_seed
from t2g_core.ppo.models import forward_in_micro_batches, load_policy
from t2g_core.ppo.report import write_heatmap, write_rollouts
from t2g_core.ppo.sampling import response_mask_after_eos, sample_seed
from t2g_core.ppo.scoring import RewardSource, ScoredResponse, decode_responses, label_responses
from t2g_core.ppo.tracking import NullTracker, Tracker
from t2g_core.progress import Progress, no_progress
from t2g_core.rl import (
    assemble_rewards,
    gae,
    make_kl_controller,
    masked_whiten,
    per_token_kl,
    policy_loss,
    task_rewards,
    value_loss,
)
from t2g_core.spans import ParsedFeedback

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


@dataclass
class Experience:
    old_logprobs: Tensor
    values: Tensor
    advantages: Tensor
    returns: Tensor


# --------------------------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------------------------


def batch_rows(step: int, n_prompts: int, batch_size: int, seed: int) -> list[int]:
    """Row numbers of step ``step``'s global batch: consecutive slices of a fresh permutation per pass over the data."""
    out = []
    for pos in range(step * batch_size, (step + 1) * batch_size):
        data_epoch, offset = divmod(pos, n_prompts)
        perm = torch.randperm(n_prompts, generator=torch.Generator().manual_seed(seed * 7919 + data_epoch))
        out.append(int(perm[offset]))
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
    """Render and left-pad the prompts, sample a response each; the tensors come back on the CPU."""
    enc = tok(_render(tok, rows), add_special_tokens=False, padding=True, return_tensors="pt")
    seeds = [sample_seed(cfg.seed, step, g) for g in global_index]
    response_ids = generate(enc["input_ids"], enc["attention_mask"], seeds, step).cpu()
    response_mask, has_eos = response_mask_after_eos(response_ids, tok.eos_token_id)
    return Rollout(
        rows, global_index, enc["input_ids"], enc["attention_mask"].bool(), response_ids, response_mask, has_eos
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


def score(ro: Rollout, reward_source: RewardSource, tokenizer, align_cfg: AlignConfig | None) -> list[ScoredResponse]:
    """decode -> critique -> label (the three parts, timed separately in :meth:`PPOTrainer.step`)."""
    decoded = decode(ro, tokenizer)
    return label_responses(decoded, critique(ro, decoded, reward_source), align_cfg)


def labels_tensor(scored: list[ScoredResponse], shape: tuple[int, int]) -> Tensor:  # -> (B, T) delta_t
    out = torch.zeros(shape, dtype=torch.float32)
    for b, s in enumerate(scored):
        out[b, : len(s.labels)] = torch.tensor(s.labels, dtype=torch.float32)
    return out


def place_task_rewards(scored: list[ScoredResponse], ro: Rollout, cfg: PPOConfig) -> tuple[Tensor, Tensor, Tensor]:
    """Task reward s_t (B, T), terminal reward (B,), and the labels delta (B, T) after failure handling."""
    mask = ro.response_mask
    labels = labels_tensor(scored, tuple(mask.shape))
    failed = torch.tensor([not s.feedback.ok for s in scored])
    no_eos = ~ro.has_eos if cfg.missing_eos_penalty is not None else torch.zeros_like(failed)
    replaced = failed | no_eos
    labels = labels * (~replaced).to(labels.dtype)[:, None]
    task = task_rewards(cfg.reward_mode, labels, mask, cfg.span_coef)
    terminal = cfg.terminal_coef * cfg.span_coef * (labels * mask).sum(dim=1)
    terminal = torch.where(failed, torch.full_like(terminal, cfg.parse_failure_reward), terminal)
    if cfg.missing_eos_penalty is not None:
        terminal = torch.where(no_eos & ~failed, torch.full_like(terminal, cfg.missing_eos_penalty), terminal)
    return task, terminal, labels


# --------------------------------------------------------------------------------------------------------------
# 4. KL, 5. GAE, 6. whiten
# --------------------------------------------------------------------------------------------------------------


def _on(device, *tensors: Tensor) -> list[Tensor]:
    return [t.to(device) for t in tensors]


@torch.no_grad()
def old_ref_values(model, ro: Rollout, cfg: PPOConfig, device) -> tuple[Tensor, Tensor, Tensor]:
    """Old and reference log-probs and values (B, T) on the CPU, ``cfg.micro_batch_size`` rows per forward."""
    args = (*_on(device, ro.query_ids, ro.query_mask, ro.response_ids, ro.response_mask), cfg.temperature)
    old_logprobs, values = forward_in_micro_batches(model, *args, micro_batch_size=cfg.micro_batch_size)
    ref_logprobs, _ = forward_in_micro_batches(model, *args, micro_batch_size=cfg.micro_batch_size, reference=True)
    m = ro.response_mask.float()
    return old_logprobs.cpu() * m, ref_logprobs.cpu() * m, values.float().cpu() * m


def advantages_and_returns(rewards: Tensor, values: Tensor, mask: Tensor, cfg: PPOConfig) -> tuple[Tensor, Tensor]:
    advantages, returns = gae(rewards, values, mask, cfg.gamma, cfg.lam)
    return masked_whiten(advantages, mask, reduce=all_reduce_sum), returns


# --------------------------------------------------------------------------------------------------------------
# 7. update
# --------------------------------------------------------------------------------------------------------------


def lr_factor(cfg: PPOConfig):
    """Multiplier of the learning rates after ``n`` optimizer updates: linear warm-up, then constant or linear decay."""
    warm, planned = max(cfg.warmup_steps, 1), max(cfg.steps * cfg.ppo_epochs * cfg.minibatches, 1)

    def factor(n: int) -> float:
        decay = max(0.0, 1.0 - n / planned) if cfg.lr_schedule == "linear" else 1.0
        return min(1.0, (n + 1) / warm) * decay

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


def minibatch_step(
    runtime: Runtime, model, optimizer, scheduler, ro: Rollout, exp: Experience, rows: list[int], cfg: PPOConfig
) -> list[float]:
    """One optimizer update on a global minibatch; returns global [policy loss, value loss, clipfrac, approx_kl,
    ratio]."""
    n_tokens = global_sum([float(ro.response_mask[rows].sum()) if rows else 0.0])[0]
    sums = torch.zeros(5, dtype=torch.float64)
    optimizer.zero_grad(set_to_none=True)
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
            )
            logprobs, values = logprobs.cpu(), values.float().cpu()
            pl, ps = policy_loss(logprobs, exp.old_logprobs[idx], exp.advantages[idx], mask, cfg.cliprange, n_tokens)
            vl, _ = value_loss(values, exp.values[idx], exp.returns[idx], mask, cfg.cliprange_value, n_tokens)
            runtime.backward(weight * (pl + cfg.vf_coef * vl))
        stats = torch.stack([pl.detach(), vl.detach(), ps["clipfrac"], ps["approx_kl"], ps["ratio"]])
        sums += weight * stats.to(torch.float64)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
    optimizer.step()
    scheduler.step()
    return all_reduce_sum(sums).tolist()


def ppo_update(
    runtime: Runtime, model, optimizer, scheduler, ro: Rollout, exp: Experience, cfg: PPOConfig, step: int
) -> dict[str, float]:
    local_pos = {g: i for i, g in enumerate(ro.global_index)}
    history: list[list[float]] = []
    stopped = 0.0
    for epoch in range(cfg.ppo_epochs):
        for rows in _minibatches(cfg, step, epoch, local_pos):
            history.append(minibatch_step(runtime, model, optimizer, scheduler, ro, exp, rows, cfg))
            if history[-1][3] > cfg.max_approx_kl:
                stopped = 1.0
                break
        if stopped:
            break
    mean = torch.tensor(history).mean(dim=0).tolist()
    return {
        "loss/policy": mean[0],
        "loss/value": mean[1],
        "ppo/clipfrac": mean[2],
        "ppo/approx_kl": mean[3],
        "ppo/ratio": mean[4],
        "ppo/first_ratio": history[0][4],
        "ppo/first_approx_kl": history[0][3],
        "ppo/early_stopped": stopped,
        "ppo/updates": float(len(history)),
    }


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
        if cfg.batch_size < self.world:  # processes may hold unequal shares (12 prompts on 8 GPUs), never none
            raise ValueError(f"batch_size {cfg.batch_size} is smaller than the process count {self.world}")
        if len(prompts_df) == 0:
            raise ValueError("no prompts to train on")
        self.prompts = prompts_df.reset_index(drop=True)
        self.reward_source, self.align_cfg, self.task_metric = reward_source, align_cfg, task_metric
        self.bundle = load_policy(
            policy_dir,
            lora_r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            target_modules=cfg.lora_target_modules,
            value_model=cfg.value_model,
            seed=cfg.seed,
            dtype=dtype,
            device=self.runtime.device,
            chunk_tokens=cfg.logprob_chunk_tokens,
            gradient_checkpointing=cfg.gradient_checkpointing,
        )
        policy_params, value_params = self.bundle.trainable_parameters()
        optimizer = torch.optim.AdamW(
            [
                {"params": policy_params, "lr": cfg.learning_rate},
                {"params": value_params, "lr": cfg.value_learning_rate},
            ],
            weight_decay=0.0,
        )
        self.model, self.optimizer = self.runtime.prepare(self.bundle.model, optimizer)  # DDP / FSDP when launched
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor(cfg))
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
        rows = batch_rows(step, len(self.prompts), self.cfg.batch_size, self.cfg.seed)
        mine = [g for g in range(self.cfg.batch_size) if g % self.world == self.rank]
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
        scored = label_responses(decoded, feedback, self.align_cfg)  # 3a. spans -> labels on the sampled ids
        t2 = time.perf_counter()
        with self.runtime.gathered(self.model) as model:
            old_logprobs, ref_logprobs, values = old_ref_values(model, ro, cfg, self.runtime.device)
        t3 = time.perf_counter()
        task, terminal, labels = place_task_rewards(scored, ro, cfg)  # 3b. place span rewards
        kl = per_token_kl(old_logprobs, ref_logprobs, ro.response_mask, cfg.kl_estimator)  # 4. KL
        rewards = assemble_rewards(task, kl, ro.response_mask, self.kl_ctl.value, terminal)
        advantages, returns = advantages_and_returns(rewards, values, ro.response_mask, cfg)  # 5. GAE, 6. whiten
        t4 = time.perf_counter()
        exp = Experience(old_logprobs, values, advantages, returns)
        metrics = ppo_update(self.runtime, self.model, self.optimizer, self.scheduler, ro, exp, cfg, step)  # 7. update
        t5 = time.perf_counter()
        metrics |= self.step_metrics(ro, scored, labels, kl, rewards)
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
        ]
        n, tokens, span_sum, pos, neg, kl_sum, r_sum, failed, eos, spans, unmatched = global_sum(local)
        out = {
            "reward/span_mean": span_sum / n,
            "reward/total_mean": r_sum / n,
            "reward/positive_frac": pos / tokens,
            "reward/negative_frac": neg / tokens,
            "kl/mean": kl_sum / n,
            "parse/failure_rate": failed / n,
            "eos/rate": eos / n,
            "response/length": tokens / n,
            "spans/unmatched_rate": unmatched / spans if spans else 0.0,
        }
        return out | self.task_metrics(ro.rows, [s.text for s in scored], "task/")

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
        optimizer_state = self.runtime.optimizer_state(self.model, self.optimizer)
        with self.runtime.gathered(self.model):  # every process: FSDP gathers the weights rank 0 writes
            return self._save(optimizer_state)

    def _save(self, optimizer_state: dict) -> Path:
        state = {
            "step": self.next_step,
            "value": self.bundle.value.state_dict(),
            "optimizer": optimizer_state,
            "scheduler": self.scheduler.state_dict(),
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
        self.runtime.load_optimizer_state(self.model, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
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
