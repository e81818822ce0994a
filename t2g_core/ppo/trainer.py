"""Span-reward PPO: one step = rollout -> score -> place span rewards -> KL -> GAE -> whiten -> update.

The per-token formulas, which module holds each part and what makes a split or resumed run reproduce the
uninterrupted one: docs/ppo.md, "One step, per token".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor

from t2g_core.config.align import AlignConfig
from t2g_core.config.ppo import WORD_LABEL_MODES, PPOConfig
from t2g_core.ppo import checkpoint as ckpt
from t2g_core.ppo.distillation import Teacher, distillation_rewards
from t2g_core.ppo.distributed import Runtime, barrier, global_sum, shared_token, to_device
from t2g_core.ppo.experience import (
    Experience,
    advantages_and_returns,
    old_ref_values,
    reuses_first_forward,
    uses_critic,
)
from t2g_core.ppo.failures import check_reward_source
from t2g_core.ppo.generation import make_backend, stream_seed
from t2g_core.ppo.hooks import Batch, Decision, Decoded, StepHook, View
from t2g_core.ppo.metrics import StepTimer, TaskMetric, critic_metrics, progress_metrics, step_metrics, task_metrics
from t2g_core.ppo.models import CRITIC_ADAPTER, TEACHER_ADAPTER, load_policy
from t2g_core.ppo.optimizer import Optimizer, lr_factor
from t2g_core.ppo.report import rollout_records, write_heatmap, write_rollouts
from t2g_core.ppo.rewards import critique, decode, labels_tensor, place_task_rewards, score
from t2g_core.ppo.rollout import Rollout, batch_rows, rollout, row_dict
from t2g_core.ppo.scoring import RewardSource, label_responses
from t2g_core.ppo.update import first_forward, ppo_update
from t2g_core.progress import Progress, no_progress
from t2g_core.rl import assemble_rewards, make_kl_controller, per_token_kl
from t2g_core.store import write_text_atomic
from t2g_core.tracking import NullTracker, Tracker

EVAL_STEP_KEY = 10**9  # eval samples use fixed streams, the same at every evaluation
HOOK_STEP_KEY = EVAL_STEP_KEY + 1  # and a hook's samples others, the same at every call


@dataclass
class PPOResult:
    run_dir: Path
    adapter_dir: Path
    history: list[dict] = field(default_factory=list)
    rollouts_path: Path | None = None
    heatmaps: list[Path] = field(default_factory=list)
    steps_done: int = 0
    reward_models: list[dict] = field(default_factory=list)  # refreshed by the critique loop: round, step, folder


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
        dtype: torch.dtype | None = None,
        hook: StepHook | None = None,
    ):
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.runtime = Runtime()
        self.rank, self.world = self.runtime.rank, self.runtime.world
        self.hook = hook
        if hook is not None and self.world > 1:
            raise ValueError("a step hook (the critique loop) runs in one process; turn it off for a multi-process run")
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
            lora=cfg.lora,
            value_model=cfg.value_model if uses_critic(cfg) else "head",  # critic-free: no value backbone to load
            seed=cfg.seed,
            dtype=dtype,
            device=self.runtime.device,
            chunk_tokens=cfg.logprob_chunk_tokens,
            gradient_checkpointing=cfg.gradient_checkpointing,
            teacher_adapter=cfg.self_distillation.on and cfg.self_distillation.teacher == "ema",
        )
        self.teacher = Teacher(cfg, self.bundle.tokenizer) if cfg.self_distillation.on else None
        if not uses_critic(cfg):
            self.bundle.value.requires_grad_(False)  # critic-free: nothing trains the value head
        policy_params, value_params = self.bundle.trainable_parameters()
        revertible = cfg.max_approx_kl is not None  # only the early stop pulls updates back, only the actor's
        self.actor = Optimizer(policy_params, cfg.learning_rate, cfg.max_grad_norm, lr_factor(cfg), revertible)
        self.critic = None
        if uses_critic(cfg):
            lr = lr_factor(cfg, actor=False)
            self.critic = Optimizer(value_params, cfg.value_learning_rate, cfg.max_grad_norm, lr, revertible=False)
        optimizers = [o for o in (self.actor, self.critic) if o is not None]
        self.model, *prepared = self.runtime.prepare(self.bundle.model, *(o.opt for o in optimizers))  # DDP / FSDP
        for o, opt in zip(optimizers, prepared, strict=True):
            o.opt, o.sharded = opt, self.runtime.fsdp
            o.params = [p for group in opt.param_groups for p in group["params"]]
        self.backend = make_backend(
            cfg,
            self.bundle.tokenizer,
            model_ref=policy_dir,
            dtype=self.bundle.dtype,
            workdir=self.run_dir,
            rank=self.rank,
        )
        self.kl_ctl = make_kl_controller(cfg.kl_coef, cfg.target_kl, cfg.kl_horizon)
        self.history: list[dict] = []
        self.records: list[dict] = []
        self.heatmaps: list[Path] = []
        self.next_step = 0
        self.write_token = shared_token()  # names this run's checkpoint staging folders (one writer each)
        self.failed_errors: list[str | None] = []  # the last step's failed rollouts' errors (what failed, if it stops)

    # ---- one step -------------------------------------------------------------------------------------------
    def local_rows(self, step: int) -> tuple[list[dict], list[int]]:
        """This process's rows of the global batch; the samples of one prompt stay together (group baselines)."""
        k = self.cfg.group_size
        rows = batch_rows(step, len(self.prompts), self.cfg.batch_size, self.cfg.seed, k)
        mine = [g for g in range(self.cfg.batch_size) if (g // k) % self.world == self.rank]
        return [row_dict(self.prompts.iloc[rows[g]]) for g in mine], mine

    def generate(self, query_ids: Tensor, query_mask: Tensor, seeds: list[int], step: int) -> Tensor:
        """Responses from the current policy through the generation backend (on the device)."""
        with self.runtime.gathered(self.model) as model:
            return self.backend.generate(
                model.causal_lm,
                *to_device(self.runtime.device, query_ids, query_mask),
                seeds,
                stream_seed(self.cfg.seed, step, self.rank),
            )

    def step(self, step: int) -> dict[str, float]:
        """One PPO step, in the order of the module docstring; ``time/<phase>`` says where its time went."""
        cfg, tok, timer = self.cfg, self.bundle.tokenizer, StepTimer()
        with timer.phase("rollout"):  # 1. rollout
            rows, global_index = self.local_rows(step)
            self.backend.sync(self.bundle.policy)
            ro = rollout(self.generate, tok, rows, global_index, cfg, step)
        with timer.phase("span_labels"):
            decoded = decode(ro, tok)
        with timer.phase("score"):  # 2. score (a due hook may relabel some rollouts, e.g. with an annotator's labels)
            read = feedback = critique(ro, decoded, self.reward_source)  # read: the source's own, for the heatmap
            if self.hook is not None and self.hook.due(step):
                feedback = self.hook.relabel(step, Batch(ro.rows, decoded, read), self.view())
        with timer.phase("span_labels"):  # 3a. labels on the sampled ids
            scored = label_responses(decoded, feedback, self.align_cfg, words=cfg.reward_mode in WORD_LABEL_MODES)
        self.failed_errors = [fb.error for fb in feedback if not fb.ok]
        first = None
        if reuses_first_forward(cfg) and not self.runtime.fsdp:  # the update's only forward doubles as the old pass
            with timer.phase("update"):
                first = first_forward(self.runtime, self.model, ro, cfg, step)
        with timer.phase("forward"), self.runtime.gathered(self.model) as model:  # what 4. and 5. read
            old_logprobs, ref_logprobs, values, entropy = old_ref_values(model, ro, cfg, self.runtime.device, first)
        teaching = None
        if self.teacher is not None:  # the teacher reads each rollout's critique (self-distillation)
            with timer.phase("teacher"), self.runtime.gathered(self.model, writeback=True) as model:
                teaching = self.teacher.read(model, ro, scored, old_logprobs, self.runtime.device)
        with timer.phase("rewards"):
            task, terminal, labels = place_task_rewards(scored, ro, cfg)  # 3b. place span (and omission) rewards
            kl = per_token_kl(old_logprobs, ref_logprobs, ro.response_mask, cfg.kl_estimator)  # 4. KL
            rewards = assemble_rewards(task, kl, ro.response_mask, self.kl_ctl.value, terminal)
            rewards, own, sd_metrics = distillation_rewards(teaching, rewards, labels, ro.response_mask)
            advantages, returns = advantages_and_returns(  # 5. advantages (GAE or another estimator), 6. whiten
                rewards, values, ro.response_mask, task, terminal, ro.group, cfg, own
            )
        with timer.phase("update"):  # 7. update
            exp = Experience(old_logprobs, values, advantages, returns)
            metrics = ppo_update(self.runtime, self.model, self.actor, self.critic, ro, exp, cfg, step, first)
        metrics |= step_metrics(ro, scored, labels, kl, rewards)
        metrics |= task_metrics(self.task_metric, ro.rows, [s.text for s in scored], "task/")
        metrics |= critic_metrics(ro, entropy, values, returns, critic=uses_critic(cfg))
        metrics |= timer.metrics() | sd_metrics | {"kl/beta": self.kl_ctl.value}
        self.kl_ctl.update(metrics["kl/mean"], cfg.batch_size)  # 8. adapt beta
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            self.record(step, ro, scored, task, terminal, kl, rewards, read)
        return metrics

    # ---- artifacts ----------------------------------------------------------------------------------------
    def record(
        self, step: int, ro: Rollout, scored, task: Tensor, terminal: Tensor, kl: Tensor, rewards: Tensor, read: list
    ) -> None:
        """Keep the step's samples for the rollouts table; rank 0 writes a heatmap (``read``: the source's feedback)."""
        records, samples = rollout_records(step, ro, scored, task, terminal, kl, rewards, read)
        self.records += records
        if self.rank == 0 and self.cfg.heatmap_samples:
            page = self.run_dir / "heatmaps" / f"step-{step:06d}.html"
            self.heatmaps.append(write_heatmap(page, step, samples, self.cfg.reward_source, self.cfg.heatmap_samples))

    # ---- checkpoints --------------------------------------------------------------------------------------
    def save(self) -> Path:
        actor_state = self.actor.state_dict(self.runtime, self.model)
        critic_state = self.critic.state_dict(self.runtime, self.model) if self.critic is not None else None
        with self.runtime.gathered(self.model):  # every process: FSDP gathers the weights rank 0 writes
            state = {
                "step": self.next_step,
                "value": self.bundle.value.state_dict(),
                "critic_adapter": self.bundle.adapter_state(CRITIC_ADAPTER),
                "teacher_adapter": self.bundle.adapter_state(TEACHER_ADAPTER),
                "actor_optimizer": actor_state,
                "critic_optimizer": critic_state,
                "kl": self.kl_ctl.state_dict(),
                "history": self.history,
                "records": self.records,
                "config": self.cfg.model_dump(mode="json"),
                "hook": self.hook.state_dict() if self.hook is not None else None,
            }
            return ckpt.save_checkpoint(
                self.run_dir,
                self.next_step,
                save_adapter=self.bundle.save_policy_adapter,
                trainer_state=state,
                rank=self.rank,
                world=self.world,
                barrier=barrier,
                token=self.write_token,
            )

    def restore(self) -> bool:
        path = ckpt.latest_checkpoint(self.run_dir)
        if path is None:
            return False
        state = self.restore_weights(path)
        self.history, self.records, self.next_step = state["history"], state["records"], int(state["step"])
        if self.hook is not None:
            self.reward_source = self.hook.load_state_dict(state.get("hook")) or self.reward_source
        return True

    def restore_weights(self, path: Path) -> dict:
        """Load checkpoint ``path``'s policy, critic, optimizers and KL controller (not the run's progress: history,
        records, step); returns its trainer state."""
        with self.runtime.gathered(self.model, writeback=True):
            state = ckpt.load_checkpoint(path, policy=self.bundle.policy, rank=self.rank)
            self.bundle.value.load_state_dict(state["value"])
            for name in (CRITIC_ADAPTER, TEACHER_ADAPTER):
                self.bundle.load_adapter_state(name, state.get(f"{name}_adapter"))
        self.actor.load_state_dict(self.runtime, self.model, state["actor_optimizer"])
        if self.critic is not None:
            self.critic.load_state_dict(self.runtime, self.model, state["critic_optimizer"])
        self.kl_ctl.load_state_dict(state["kl"])
        return state

    # ---- evaluation ---------------------------------------------------------------------------------------
    def evaluate(self, eval_df: pd.DataFrame) -> dict[str, float]:
        idx = [i for i in range(len(eval_df)) if i % self.world == self.rank]
        rows = [row_dict(eval_df.iloc[i]) for i in idx]
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
        return out | task_metrics(self.task_metric, rows, [s.text for s in scored], "eval/task_")

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
        if self.hook is not None and self._after(self.hook.start(self.view()), tracker).get("save"):
            self.save()  # the warm start, certified by the hook
        for step in range(self.next_step, last):
            if self.hook is not None and self.hook.stopped:
                break
            metrics = self.step(step)
            if eval_df is not None and (step % cfg.eval_every == 0 or step == cfg.steps - 1):
                metrics |= self.evaluate(eval_df)
            self.next_step = step + 1
            due = self.hook is not None and self.hook.due(step)
            decided = self._after(self.hook.after_step(step, self.view()), tracker) if due else {}
            metrics |= decided.get("metrics", {})
            self.history.append({"step": step, **metrics})
            if self.rank == 0:
                tracker.log_metrics(metrics, step=step)
                progress("ppo", self.next_step, cfg.steps, progress_metrics(metrics))
            if step % cfg.log_every == 0 or step == cfg.steps - 1:
                self.write_rollouts(tracker)
            check_reward_source(self.history, cfg, self.failed_errors)  # every process: the same global rates
            if self.next_step % cfg.save_every == 0 or self.next_step == last or due:
                self.save()
        return self.result()

    # ---- the hook ------------------------------------------------------------------------------------------
    def view(self) -> View:
        return View(
            self.bundle.tokenizer,
            self.reward_source,
            self.sample,
            lambda step: ckpt.checkpoint_folder(self.run_dir, step).name,
        )

    def sample(self, rows: list[dict]) -> Decoded:
        """The current policy's responses to ``rows``, from fixed streams (the same ones at every call)."""
        self.backend.sync(self.bundle.policy)
        ro = rollout(self.generate, self.bundle.tokenizer, rows, list(range(len(rows))), self.cfg, HOOK_STEP_KEY)
        return decode(ro, self.bundle.tokenizer)

    def _after(self, decision: Decision, tracker: Tracker) -> dict:
        """Carry out a hook's decision: restore a checkpoint, score with a new reward source, log its files."""
        if decision.restore is not None:
            self.restore_weights(self.run_dir / "checkpoints" / decision.restore)
        if decision.reward_source is not None:
            self.reward_source = decision.reward_source
        for path, folder in decision.artifacts:
            tracker.log_artifact(path, folder)
        return {"metrics": decision.metrics, "save": decision.save or decision.stop}

    def replay_history(self, tracker: Tracker) -> None:
        """Log the restored steps' metrics again (rank 0), so a resumed run's tracking run holds every step."""
        if self.rank == 0:
            for entry in self.history:
                tracker.log_metrics({k: v for k, v in entry.items() if k != "step"}, step=int(entry["step"]))

    def write_rollouts(self, tracker: Tracker) -> Path | None:
        if self.rank != 0 or not self.records:
            return None
        path = write_rollouts(self.run_dir / "rollouts.parquet", self.records)
        tracker.log_artifact(path)
        if self.heatmaps:
            tracker.log_artifact(self.heatmaps[-1], "heatmaps")
        return path

    def write_loaded(self) -> None:
        """``models.json``: what this run loaded (name, revision, cached commit, dtype, pad token) and on what."""
        if self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            info = {"policy": self.bundle.loaded, "device": str(self.runtime.device), "processes": self.world}
            info |= {"distributed": self.runtime.accelerator.distributed_type.name}
            info |= {"generation_backend": self.cfg.generation_backend}
            write_text_atomic(self.run_dir / "models.json", json.dumps(info, indent=2))

    def result(self) -> PPOResult:
        adapter = self.run_dir / "adapter"
        with self.runtime.gathered(self.model):
            if self.rank == 0:
                self.bundle.save_policy_adapter(adapter)
                write_text_atomic(self.run_dir / "history.json", json.dumps(self.history, indent=1))
        barrier()
        rollouts = self.run_dir / "rollouts.parquet"
        refreshed = self.hook.refreshed() if self.hook is not None else []
        found = rollouts if rollouts.exists() else None
        return PPOResult(self.run_dir, adapter, self.history, found, self.heatmaps, self.next_step, refreshed)


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
    dtype: torch.dtype | None = None,
    progress: Progress = no_progress,
    hook: StepHook | None = None,
) -> PPOResult:
    """Train a LoRA policy with span-reward PPO; ``resume=True`` continues from ``out_dir``'s latest checkpoint.
    ``policy_dir`` is a folder or a Hub id (``@revision``); the base loads in ``dtype`` (``models.dtype`` as the
    stage resolved it; None: the ``auto`` rule for the device). ``hook`` watches the run (the critique loop, which
    audits and refreshes the reward model on the policy's rollouts: :mod:`t2g_core.critique_loop`)."""
    trainer = PPOTrainer(
        cfg,
        policy_dir,
        prompts_df,
        out_dir,
        reward_source=reward_source,
        align_cfg=align_cfg,
        task_metric=task_metric,
        dtype=dtype,
        hook=hook,
    )
    if resume and not trainer.restore():
        raise FileNotFoundError(f"{out_dir}: no checkpoint to resume from (expected checkpoints/latest)")
    if resume:
        trainer.replay_history(tracker or NullTracker())
    return trainer.fit(tracker=tracker or NullTracker(), eval_df=eval_df, stop_after=stop_after, progress=progress)
