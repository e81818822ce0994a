"""Which feedback to train on."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig

Task = Literal["summarization", "code", "qa"]


class DataConfig(StageConfig):
    source: str = Field(
        "demo",
        description=(
            "'demo' to generate the built-in demo data; a path to feedback (Parquet, JSONL, CSV or a datasets folder); "
            "with `dataset` set, a path to that dataset's own files, or 'hub' to read it from the Hugging Face Hub."
        ),
    )
    dataset: str | None = Field(
        None,
        description="Public dataset adapter to ingest (slf5k, ultrafeedback, kodcode, humaneval, mbpp); None = "
        "source is feedback.",
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


class HoldoutConfig(StageConfig):
    """How the feedback's prompts are divided between PPO training and held-out evaluation."""

    eval_fraction: float = Field(0.25, ge=0.0, lt=1.0, description="Fraction of prompts held out for evaluation.")
    seed: int = Field(0, description="Seed of the split (which prompts are held out).")
