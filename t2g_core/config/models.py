"""Base models: a Hugging Face id or folder, or the tiny local models the project builds itself."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from t2g_core.config.base import StageConfig, recipe_path

TinySize = Literal["demo", "mini", "smoke"]  # the builder specs of t2g_core.models.tiny.SIZES


class ModelsConfig(StageConfig):
    policy: str = Field(
        "tiny",
        description="Policy base: 'tiny' (built locally), a folder, or a Hugging Face id ORG/NAME[@REVISION].",
        json_schema_extra=recipe_path("tiny"),
    )
    reward_model_base: str = Field(
        "tiny",
        description="Reward-model base: 'tiny' (built locally), a folder, or a Hugging Face id ORG/NAME[@REVISION].",
        json_schema_extra=recipe_path("tiny"),
    )
    tiny: TinySize = Field(
        "demo", description="Size of the tiny models built locally: demo, mini (the CPU recipes), smoke (seconds)."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="Weights dtype of every model a stage loads: auto = bfloat16 on a GPU that has it, else float32.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_builder_settings(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("tiny"), dict):
            raise ValueError(
                "models.tiny is now the name of a size (demo, mini or smoke): the builder's settings are no longer "
                "settings (t2g_core.models.tiny.SIZES)"
            )
        return data
