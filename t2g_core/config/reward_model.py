"""Generative reward model: LoRA SFT to write the critique, then the span JSON."""

from __future__ import annotations

from pydantic import Field

from t2g_core.config.base import StageConfig


class RewardModelConfig(StageConfig):
    max_prompt_tokens: int = Field(384, ge=32, description="Token budget of the rendered prompt; the content is truncated, never the template.")
    max_target_tokens: int = Field(192, ge=16, description="Token budget of the target (critique + span JSON + EOS).")
    val_fraction: float = Field(0.1, ge=0, lt=1, description="Fraction of items in the validation split (deterministic by id hash).")
    lora_r: int = Field(16, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha.")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout.")
    lora_target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], description="Modules that get LoRA adapters."
    )
    learning_rate: float = Field(2e-3, gt=0, description="Learning rate (tiny models like a high one; use 1e-5..2e-5 for 8B).")
    epochs: float = Field(3.0, gt=0, description="Training epochs.")
    batch_size: int = Field(8, ge=1, description="Per-device batch size.")
    grad_accum: int = Field(1, ge=1, description="Gradient accumulation steps.")
    save_steps: int = Field(50, ge=1, description="Checkpoint every N optimizer steps.")
    logging_steps: int = Field(5, ge=1, description="Log metrics every N steps.")
    bf16: bool = Field(False, description="Train in bfloat16 (GPU).")
    max_new_tokens: int = Field(192, ge=8, description="Generation budget when scoring.")
    temperature: float = Field(0.0, ge=0, description="0 = greedy decoding when scoring.")
    score_batch_size: int = Field(16, ge=1, description="Batch size of generation when scoring.")
    seed: int = Field(0, description="Training seed.")
