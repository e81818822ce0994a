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
        description=(
            "'demo' to generate the built-in demo data; 'latest' for the workspace's latest feedback dataset version "
            "(what the inbox re-annotation appended to; its annotations are reused when they cover it); a path to "
            "feedback (Parquet, JSONL, CSV or a datasets folder); with `dataset` set, a path to that dataset's own "
            "files, or 'hub' to read it from the Hugging Face Hub. A relative path in a recipe file is relative to the "
            "recipe's folder."
        ),
        json_schema_extra=recipe_path("demo", "hub", LATEST),
    )
    dataset: str | None = Field(
        None,
        description="Public dataset adapter to ingest (slf5k, ultrafeedback, kodcode, humaneval, mbpp); with "
        "`columns`, any Hugging Face dataset id or local dataset file / folder; None = source is feedback.",
        json_schema_extra=recipe_path(),
    )
    columns: dict[str, str] | None = Field(
        None,
        description="Column mapping for a dataset without an adapter: feedback column -> dataset column, e.g. "
        "{prompt: question, response: answer}; prompt and response are required, id, critique, reference, tests and "
        "entry_point optional. The dataset is streamed: only `limit` rows are read.",
    )
    split: str | None = Field(None, description="Dataset split to ingest (default per dataset).")
    limit: int | None = Field(None, ge=1, description="Ingest at most this many feedback rows.")
    task: Task = Field("summarization", description="Task of the demo data and of the prompts used downstream.")
    n_items: int = Field(
        1024,
        ge=1,
        description="Number of demo items to generate (ignored for a path source); the tagger reward model needs about "
        "a thousand to catch invented values (benchmarks/bench_rm.py).",
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
