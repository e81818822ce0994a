"""Supervised warm-up of the policy before PPO (optional): LoRA SFT on the reference responses of the training prompts.

A pretrained instruct model does not know the task's format; a few supervised steps on the references teach it, so
PPO spends its steps on the errors the policy still makes. The warmed-up policy is what PPO starts from *and* its KL
reference (the SFT model is the reference, as in RLHF practice), and the baseline the evaluation compares PPO with.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config import lora
from t2g_core.config.base import StageConfig
from t2g_core.config.lora import LoRA


class WarmupConfig(StageConfig):
    SECTION = "warmup"
    RENAMED = lora.RENAMED
    enabled: bool = Field(False, description="Fine-tune the policy on the training prompts' references before PPO.")
    steps: int = Field(60, ge=1, description="Optimizer steps (each of batch_size x grad_accum pairs).")
    batch_size: int = Field(8, ge=1, description="Pairs per forward pass.")
    grad_accum: int = Field(1, ge=1, description="Gradient accumulation steps per optimizer step.")
    learning_rate: float = Field(2e-4, gt=0, description="Learning rate of the LoRA weights.")
    lr_scheduler: Literal["constant", "linear", "cosine"] = Field(
        "linear", description="Learning-rate schedule over the steps."
    )
    lora: LoRA = Field(default_factory=LoRA, description="The LoRA adapter, merged into the policy afterwards.")
    max_length: int = Field(
        1024, ge=16, description="Token budget of prompt plus reference; longer pairs are left out, never cut."
    )
    max_items: int = Field(0, ge=0, description="Train on at most this many training prompts (0 = all).")
    save_steps: int = Field(25, ge=1, description="Checkpoint every N optimizer steps (a killed warm-up resumes).")
    seed: int = Field(0, description="Seed of the LoRA initialisation and the data order.")
