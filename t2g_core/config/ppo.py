"""Span-reward PPO: one trainer, three reward modes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig, recipe_path


class PPOConfig(StageConfig):
    reward_mode: Literal["span", "scalar", "dense"] = Field(
        "span",
        description="span = Text2Grad token rewards; scalar = sum of span labels on the last token; dense = that sum "
        "/ T on every token.",
    )
    reward_source: Literal["reward_model", "endpoint", "oracle"] = Field(
        "reward_model",
        description="reward_model = the reward model the pipeline trained (the paper's loop; a tagger or a generative "
        "model, reward_model.kind); endpoint = a reward model served over HTTP (reward_model.endpoint: vLLM serving "
        "the adapter, or an LLM as online critic); oracle = the task's programmatic critic (reference or code "
        "critic), for benchmarks.",
    )
    steps: int = Field(40, ge=1, description="PPO steps (rollout batches).")
    batch_size: int = Field(64, ge=1, description="Prompts per rollout batch (global).")
    minibatches: int = Field(2, ge=1, description="Minibatches per PPO epoch.")
    grad_accum: int = Field(1, ge=1, description="Gradient accumulation steps per minibatch.")
    ppo_epochs: int = Field(4, ge=1, description="Passes over each rollout batch.")
    learning_rate: float = Field(1e-3, gt=0, description="Policy (LoRA) learning rate.")
    value_learning_rate: float = Field(3e-4, gt=0, description="Value model learning rate.")
    lora_r: int = Field(16, ge=1, description="Policy LoRA rank.")
    lora_alpha: int = Field(32, ge=1, description="Policy LoRA alpha.")
    lora_target_modules: list[str] | str = Field(
        "all-linear",
        description="Modules that get LoRA adapters in the policy: a list of names or peft's 'all-linear'.",
    )
    value_model: Literal["head", "separate"] = Field(
        "separate",
        description="head = zero-init value head on the policy's hidden states; separate = a copy of the base with "
        "its own head.",
    )
    kl_coef: float = Field(0.05, ge=0, description="Initial KL coefficient beta.")
    kl_estimator: Literal["k1", "k3"] = Field("k1", description="Per-token KL estimator.")
    adaptive_kl: bool = Field(False, description="Adapt beta towards target_kl.")
    target_kl: float = Field(6.0, gt=0, description="Target KL (nats per sequence) of the adaptive controller.")
    kl_horizon: int = Field(10000, ge=1, description="Horizon of the adaptive KL controller.")
    span_coef: float = Field(1.0, description="c in r_t = m_t (c*delta_t - beta*KL_t).")
    terminal_coef: float = Field(
        0.0, description="Weight of an optional terminal scalar added to span rewards (hybrid)."
    )
    parse_failure_reward: float = Field(0.0, description="Reward of a sample whose critique failed to parse.")
    missing_eos_penalty: float | None = Field(
        None, description="Reward replacing the score of a response without EOS (None = off)."
    )
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount.")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    cliprange: float = Field(0.2, gt=0, description="Policy ratio clip.")
    cliprange_value: float = Field(0.2, gt=0, description="Value clip around the old values.")
    vf_coef: float = Field(0.1, ge=0, description="Value loss coefficient.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping.")
    max_approx_kl: float = Field(
        0.03,
        gt=0,
        description="Stop the update of a batch early once a minibatch's approximate KL exceeds this (1.0 = "
        "practically never).",
    )
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of rollouts (also applied when recomputing log-probs)."
    )
    max_new_tokens: int = Field(48, ge=1, description="Maximum response tokens.")
    generation_backend: Literal["exact", "hf", "vllm"] = Field(
        "exact",
        description="How rollouts are sampled: exact = per-sample float64 noise streams (CPU; a sample does not depend "
        "on its batch or process); hf = transformers' batched generate on the device, seeded per step and process (the "
        "GPU choice); vllm = a colocated vLLM engine with the LoRA adapter synchronised every step (the vllm extra).",
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, lt=1, description="Share of the GPU's memory vLLM may take (generation_backend=vllm)."
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="Rows per forward pass of the old-log-prob, reference and value passes (None = the whole local "
        "batch at once); lower it when those passes run out of memory.",
    )
    logprob_chunk_tokens: int = Field(
        1024,
        ge=1,
        description="Token positions whose full-vocabulary logits exist at once when log-probs are computed (the "
        "(B, T, V) logits are never built: 1024 x 128k float32 is 0.5 GB).",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute the transformer layers' activations in the backward pass: less memory, ~30% "
        "more compute.",
    )
    eval_every: int = Field(10, ge=1, description="Evaluate the task score on held-out prompts every N steps.")
    log_every: int = Field(5, ge=1, description="Write rollouts and the token-reward heatmap every N steps.")
    save_every: int = Field(10, ge=1, description="Checkpoint every N steps.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warmup over this many optimizer updates.")
    lr_schedule: Literal["constant", "linear"] = Field(
        "linear",
        description="After warm-up: constant, or linear decay to 0 over the planned updates (steps x epochs x "
        "minibatches).",
    )
    reward_model_path: str | None = Field(
        None,
        description="Reward-model folder or adapter for reward_source=reward_model (None = the workspace's latest).",
        json_schema_extra=recipe_path(),
    )
    heatmap_samples: int = Field(4, ge=0, description="Samples shown in the token-reward heatmap per logging interval.")
    run_name: str | None = Field(
        None,
        description="Run folder name under `WORKSPACE/checkpoints/ppo` for `t2g ppo train` (None = derived from "
        "mode and "
        "seed).",
    )
    seed: int = Field(
        0,
        description="Seed: data order, LoRA init, minibatch order; each sample's stream derives from (seed, step, "
        "index).",
    )
