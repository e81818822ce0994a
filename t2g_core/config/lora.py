"""LoRA adapters: one shape, nested wherever a stage trains one (``ppo.lora``, ``warmup.lora``,
``reward_model.lora``)."""

from __future__ import annotations

from pydantic import Field

from t2g_core.config.base import StageConfig

RENAMED = {f"lora_{k}": f"lora.{k}" for k in ("r", "alpha", "dropout", "target_modules")}


class LoRA(StageConfig):
    r: int = Field(16, ge=1, description="LoRA rank.")
    alpha: int = Field(32, ge=1, description="LoRA alpha (updates are scaled by alpha / r).")
    dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout.")
    target_modules: list[str] | str = Field(
        "all-linear", description="Modules that get adapters: a list of names, or peft's 'all-linear'."
    )
