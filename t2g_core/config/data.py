"""Which feedback to train on."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from t2g_core.config.base import StageConfig, recipe_path

Task = Literal["summarization", "code", "qa"]
LATEST = "latest"  # data.source: the workspace's latest feedback dataset version
MAPPABLE = ("id", "prompt", "response", "critique", "reference", "tests", "entry_point")  # feedback columns
REQUIRED_MAPPED = ("prompt", "response")


def check_columns(columns: dict[str, str]) -> None:
    """A column mapping (feedback column -> dataset column) names known feedback columns, prompt and response."""
    unknown = sorted(set(columns) - set(MAPPABLE))
    if unknown:
        raise ValueError(f"columns: {', '.join(unknown)} cannot be mapped; feedback columns are {', '.join(MAPPABLE)}")
    missing = [c for c in REQUIRED_MAPPED if c not in columns]
    if missing:
        raise ValueError(f"columns: map {' and '.join(missing)} (e.g. prompt=question,response=answer)")


class DataConfig(StageConfig):
    source: str = Field(
        "demo",
        description="'demo', 'latest' (the workspace's latest version), a feedback file or folder, or with `dataset` "
        "its files or 'hub'.",
        json_schema_extra=recipe_path("demo", "hub", LATEST),
    )
    dataset: str | None = Field(
        None,
        description="Dataset adapter (slf5k, ultrafeedback, kodcode, humaneval, mbpp), or with `columns` any dataset "
        "id or file.",
        json_schema_extra=recipe_path(),
    )
    columns: dict[str, str] | None = Field(
        None,
        description="Column mapping for a dataset without an adapter: feedback column -> its column, e.g. {prompt: q, "
        "response: a}.",
    )
    split: str | None = Field(None, description="Dataset split to ingest (default per dataset).")
    limit: int | None = Field(None, ge=1, description="Ingest at most this many feedback rows.")
    task: Task = Field("summarization", description="Task of the demo data and of the prompts used downstream.")
    n_items: int = Field(
        1024,
        ge=1,
        description="Demo items to generate (the tagger reward model needs about 1000 to catch invented values).",
    )
    seed: int = Field(0, description="Seed for demo data generation (the held-out split has its own: holdout.seed).")

    @model_validator(mode="after")
    def _check_columns(self) -> DataConfig:
        if self.columns is not None:
            if self.dataset is None:
                raise ValueError("data.columns maps the columns of data.dataset: set data.dataset too")
            check_columns(self.columns)
        return self


class HoldoutConfig(StageConfig):
    """How the feedback's prompts are divided between PPO training and held-out evaluation."""

    eval_fraction: float = Field(0.25, ge=0.0, lt=1.0, description="Fraction of prompts held out for evaluation.")
    seed: int = Field(0, description="Seed of the split (which prompts are held out).")
