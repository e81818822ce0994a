"""Span-reward PPO: one trainer, four reward modes, five advantage estimators (``docs/ppo.md`` explains each setting
and the measurements behind its default)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from t2g_core.config import lora, sampling
from t2g_core.config.base import StageConfig, recipe_path
from t2g_core.config.critique_loop import CritiqueLoopConfig
from t2g_core.config.lora import LoRA
from t2g_core.config.sampling import Sampling
from t2g_core.config.self_distillation import SelfDistillation

HYBRID_MODES = ("span", "dense")  # reward modes where a terminal scalar adds information (terminal_coef)
WORD_LABEL_MODES = ("dense",)  # reward modes whose labels are the critic's word-level scores
CRITIC_FREE = ("rloo", "grpo")  # advantage estimators with a group baseline instead of a value model
RENAMED = {
    **lora.RENAMED,
    **sampling.RENAMED,
    "advantage": "advantage_estimator",
    "grpo_scale": "grpo_std_floor (null: no scaling)",
    "adaptive_kl": "target_kl (null: a fixed beta)",
    "value_max_grad_norm": "max_grad_norm (the value model is clipped on its own at the same norm)",
    "run_name": "`t2g ppo train --run-dir` (a folder, not a setting)",
}


class RewardModelGate(StageConfig):
    """How good the trained reward model must be on held-out items before PPO learns from it."""

    min_poor_f1: float = Field(
        0.5, ge=0, le=1, description="With ground truth: the least character F1 of its poor spans (truth_poor_char_f1)."
    )
    min_flaw_recall: float = Field(
        0.25, ge=0, le=1, description="With ground truth: the least share of each kind of flaw it marks poor."
    )
    min_agreement_f1: float = Field(
        0.2, ge=0, le=1, description="Without ground truth: the least span F1 against the annotator (span_f1)."
    )
    allow_weak: bool = Field(False, description="Train PPO on a reward model below these floors anyway (logged).")


class PPOConfig(StageConfig):
    SECTION = "ppo"
    RENAMED = RENAMED
    reward_mode: Literal["span", "scalar", "uniform", "dense"] = Field(
        "span",
        description="span = token rewards on the spans; scalar = their sum on the last token; uniform = spread "
        "evenly; dense = per word.",
    )
    advantage_estimator: Literal["gae", "span_local", "span_bootstrap", "rloo", "grpo"] = Field(
        "gae", description="Credit assignment: gae, span_local, span_bootstrap, or the critic-free rloo and grpo."
    )
    grpo_std_floor: float | None = Field(
        None, gt=0, description="grpo: divide by the group's std at each position, floored at this (null: no scaling)."
    )
    group_size: int = Field(1, ge=1, description="Samples per prompt in a batch; rloo and grpo need 2 or more.")
    omission_penalty: float = Field(1.0, ge=0, description="Reward -p per item the critic reports missing.")
    omission_placement: Literal["anchor", "end"] = Field(
        "anchor", description="An omission's penalty goes where the content belonged (anchor) or on the last token."
    )
    reward_source: Literal["reward_model", "endpoint", "oracle"] = Field(
        "reward_model",
        description="reward_model = the one the pipeline trained; endpoint = one served over HTTP; oracle = the "
        "task's programmatic critic.",
    )
    steps: int = Field(40, ge=1, description="PPO steps (rollout batches).")
    batch_size: int = Field(64, ge=1, description="Prompts per rollout batch (global).")
    minibatches: int = Field(2, ge=1, description="Minibatches per PPO epoch.")
    grad_accum: int = Field(1, ge=1, description="Gradient accumulation steps per minibatch.")
    ppo_epochs: int = Field(4, ge=1, description="Passes over each rollout batch.")
    learning_rate: float = Field(1e-3, gt=0, description="Policy (LoRA) learning rate.")
    value_learning_rate: float = Field(3e-4, gt=0, description="Value model learning rate.")
    lora: LoRA = Field(default_factory=LoRA, description="The policy's LoRA adapter (dropout must be 0).")
    value_model: Literal["head", "separate", "lora"] = Field(
        "separate",
        description="head = a value head on the policy; separate = a copy of the base; lora = a second adapter on the "
        "policy's base.",
    )
    kl_coef: float = Field(0.05, ge=0, description="Initial KL coefficient beta.")
    kl_estimator: Literal["k1", "k3"] = Field("k1", description="Per-token KL estimator.")
    target_kl: float | None = Field(
        None, gt=0, description="Adapt beta towards this KL (nats per sequence; null: beta stays kl_coef)."
    )
    kl_horizon: int = Field(10000, ge=1, description="Horizon of the adaptive KL controller.")
    span_coef: float = Field(1.0, description="c in r_t = m_t (c * delta_t - beta * KL_t).")
    terminal_coef: float = Field(
        0.0, description="Weight of the sum of the labels added on the last token (span and dense modes only)."
    )
    outcome_coef: float = Field(
        1.0, ge=0, description="Weight of a critic's overall verdict in [-1, 1], added on the last token."
    )
    degenerate_margin: float = Field(
        1.0, gt=0, description="An empty, crashing or hanging response gets the worst real attempt's reward minus this."
    )
    parse_failure_reward: float = Field(0.0, description="Reward of a sample whose critique failed.")
    max_reward_failure_rate: float = Field(
        0.5, ge=0, le=1, description="Stop when the reward source fails on more of a step's rollouts (1 = never)."
    )
    reward_failure_patience: int = Field(
        3, ge=1, description="Consecutive steps over max_reward_failure_rate after which PPO stops."
    )
    missing_eos_penalty: float | None = Field(None, description="Reward of a response without EOS (null: off).")
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount.")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    cliprange: float = Field(0.2, gt=0, description="Policy ratio clip.")
    cliprange_value: float = Field(0.2, gt=0, description="Value clip around the old values.")
    vf_coef: float = Field(0.1, ge=0, description="Value loss coefficient.")
    max_grad_norm: float = Field(
        1.0, gt=0, description="Gradient-norm clip of the policy and, on its own, the value model."
    )
    critic_warmup_steps: int = Field(0, ge=0, description="First steps that train only the critic.")
    max_approx_kl: float | None = Field(
        0.03, gt=0, description="Undo an update whose approximate KL(old || new) exceeds this (null: no early stop)."
    )
    sampling: Sampling = Field(default_factory=Sampling, description="How rollouts are sampled (temperature > 0).")
    generation_backend: Literal["exact", "hf", "vllm"] = Field(
        "exact",
        description="exact = per-sample noise streams (CPU); hf = batched generate (GPU); vllm = colocated vLLM.",
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, lt=1, description="Share of the GPU's memory vLLM may take (generation_backend=vllm)."
    )
    micro_batch_size: int | None = Field(
        None, ge=1, description="Rows per forward pass of the log-prob and value passes (null: the whole batch)."
    )
    logprob_chunk_tokens: int = Field(
        1024, ge=1, description="Positions whose full-vocabulary logits exist at once when log-probs are computed."
    )
    gradient_checkpointing: bool = Field(False, description="Recompute activations in the backward pass.")
    eval_every: int = Field(10, ge=1, description="Evaluate the task score on held-out prompts every N steps.")
    log_every: int = Field(5, ge=1, description="Write rollouts and the token-reward heatmap every N steps.")
    save_every: int = Field(10, ge=1, description="Checkpoint every N steps.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warm-up over this many updates.")
    lr_schedule: Literal["constant", "linear"] = Field(
        "linear", description="After warm-up: constant, or linear decay to 0 with training progress."
    )
    reward_model_gate: RewardModelGate = Field(
        default_factory=RewardModelGate, description="Quality floors the reward model must meet before PPO."
    )
    reward_model_path: str | None = Field(
        None,
        description="Reward-model folder for reward_source=reward_model (null: the one the pipeline trained).",
        json_schema_extra=recipe_path(),
    )
    critique_loop: CritiqueLoopConfig = Field(
        default_factory=CritiqueLoopConfig, description="Audit and refresh the reward model on the policy's rollouts."
    )
    self_distillation: SelfDistillation = Field(
        default_factory=SelfDistillation, description="Token credit from a teacher that reads each rollout's critique."
    )
    heatmap_samples: int = Field(
        4,
        ge=0,
        description="Samples shown in the token-reward heatmap per logging step (besides those the critique loop "
        "audited).",
    )
    seed: int = Field(0, description="Seed of data order, LoRA init, minibatches and each sample's stream.")

    @property
    def degenerate_reward(self) -> float:
        """Below every real attempt: a failing attempt with every label poor and its implementation missing."""
        return -(abs(self.span_coef) * (1 + self.omission_penalty) + self.outcome_coef) - self.degenerate_margin

    @model_validator(mode="after")
    def _check_combinations(self) -> PPOConfig:
        problems = [
            (
                bool(self.terminal_coef) and self.reward_mode not in HYBRID_MODES,
                f"terminal_coef applies to {' and '.join(HYBRID_MODES)} rewards only; with reward_mode="
                f"{self.reward_mode} the sequence score is already the reward (set terminal_coef to 0)",
            ),
            (
                self.batch_size % self.group_size,
                f"batch_size {self.batch_size} must be a multiple of group_size {self.group_size}",
            ),
            (
                self.advantage_estimator in CRITIC_FREE and self.group_size < 2,
                f"advantage_estimator={self.advantage_estimator} needs group_size >= 2 samples per prompt",
            ),
            (
                self.advantage_estimator in CRITIC_FREE and self.critic_warmup_steps,
                f"advantage_estimator={self.advantage_estimator} has no critic to warm up (critic_warmup_steps: 0)",
            ),
            (
                self.critique_loop.enabled is True and self.critique_loop.budget > self.batch_size,
                f"critique_loop.budget {self.critique_loop.budget} exceeds the batch ({self.batch_size}): a round "
                "annotates rollouts of one step",
            ),
            (
                self.critic_warmup_steps >= self.steps,
                f"critic_warmup_steps {self.critic_warmup_steps} leaves none of the {self.steps} steps",
            ),
            (self.sampling.greedy, "sampling.temperature must be > 0: PPO's log-probs divide by it"),
            (self.lora.dropout, "lora.dropout must be 0: PPO's ratio compares two forward passes of the policy"),
        ]
        errors = [message for broken, message in problems if broken]
        if errors:
            raise ValueError("; ".join(errors))
        return self
