"""Generative reward model: LoRA SFT to write the critique, then the span JSON."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig


class RewardModelConfig(StageConfig):
    # data
    max_prompt_tokens: int = Field(
        384, ge=32, description="Token budget of the rendered prompt; the content is truncated, never the template."
    )
    max_target_tokens: int = Field(
        192,
        ge=16,
        description="Token budget of the target (critique + span JSON + EOS); longer targets are dropped from "
        "training.",
    )
    val_fraction: float = Field(
        0.1, ge=0, lt=1, description="Fraction of items in the validation split (deterministic by id hash)."
    )
    # LoRA
    lora_r: int = Field(16, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha.")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout.")
    lora_target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], description="Modules that get LoRA adapters."
    )
    # optimisation
    learning_rate: float = Field(
        5e-3,
        gt=0,
        description="Learning rate; the default suits the tiny demo models (benchmarks/bench_rm.py); use 1e-5..2e-5 "
        "for 8B bases.",
    )
    lr_scheduler: Literal["constant", "linear", "cosine"] = Field(
        "linear", description="Learning-rate schedule after warm-up."
    )
    warmup_ratio: float = Field(
        0.05, ge=0, lt=1, description="Fraction of the steps spent warming the learning rate up."
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    epochs: float = Field(
        6.0,
        gt=0,
        description="Training epochs (ignored when max_steps > 0); 6 x 232 demo items = 174 steps at batch 8.",
    )
    max_steps: int = Field(-1, description="Optimizer steps; -1 = derive from epochs.")
    batch_size: int = Field(8, ge=1, description="Per-device batch size.")
    grad_accum: int = Field(1, ge=1, description="Gradient accumulation steps.")
    save_steps: int = Field(
        50, ge=1, description="Checkpoint every N optimizer steps (training resumes from the last one)."
    )
    save_total_limit: int = Field(2, ge=1, description="Checkpoints kept on disk.")
    logging_steps: int = Field(1, ge=1, description="Log metrics (loss, learning rate, grad norm) every N steps.")
    precision: Literal["auto", "bf16", "fp32"] = Field(
        "auto", description="auto = bf16 on a GPU that supports it, fp32 otherwise (CPU); the same code runs on both."
    )
    gradient_checkpointing: bool = Field(
        False, description="Trade compute for memory (useful for large bases on a GPU)."
    )
    seed: int = Field(0, description="Training seed.")
    # generation (evaluation and PPO-time scoring)
    max_new_tokens: int = Field(192, ge=8, description="Generation budget when scoring.")
    temperature: float = Field(0.0, ge=0, description="0 = greedy decoding when scoring; else sampling temperature.")
    score_batch_size: int = Field(16, ge=1, description="Batch size of generation when scoring.")
    eval_max_items: int = Field(0, ge=0, description="Evaluate on at most this many validation items (0 = all).")
    eval_examples: int = Field(5, ge=0, description="Rendered examples kept in the evaluation report.")
    # registry
    registered_name: str = Field("text2grad-reward-model", description="MLflow registered model name of the adapter.")
    promote_metric: str = Field(
        "span_f1", description="Evaluation metric that decides promotion from candidate to champion (higher is better)."
    )
