"""Settings that validate one by one but cannot work together, refused before a run starts.

Each check names the settings involved, why they clash and how to get out: change one of them, or accept the risk
with the ``checks`` field named in the message (a smoke run that is meant to be small says so explicitly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from t2g_core.config.base import StageConfig

if TYPE_CHECKING:
    from t2g_core.config import PipelineConfig

MIN_TAGGER_ITEMS = 1000  # demo items the span tagger needs to catch invented values (benchmarks/bench_rm.py)


class ChecksConfig(StageConfig):
    """Accepted risks: combinations of settings the pipeline refuses unless told they are meant."""

    small_tagger_data: bool = Field(
        False,
        description=f"Accept a span tagger trained on fewer than {MIN_TAGGER_ITEMS} demo items (smoke runs: it "
        "misses invented values).",
    )


def tagger_on_too_few_items(cfg: PipelineConfig) -> str | None:
    """The pipeline trains a span tagger on the demo data, PPO scores with it, and there are too few items."""
    trains_tagger = cfg.reward_model.kind == "tagger" and cfg.data.source == "demo"
    scores_with_it = cfg.ppo.reward_source == "reward_model" and not cfg.ppo.reward_model_path
    if not (trains_tagger and scores_with_it) or cfg.data.n_items >= MIN_TAGGER_ITEMS or cfg.checks.small_tagger_data:
        return None
    return (
        f"data.n_items={cfg.data.n_items} is too few for reward_model.kind=tagger: the tagger needs about "
        f"{MIN_TAGGER_ITEMS} items to catch invented values (benchmarks/bench_rm.py), and PPO would learn from it. "
        f"Raise data.n_items to {MIN_TAGGER_ITEMS} or more, or set checks.small_tagger_data=true for a smoke run "
        "(the tiny preset does)"
    )


def tagger_in_several_processes(cfg: PipelineConfig) -> str | None:
    """The span tagger trains by a loop of its own in one process: each process of a gang would repeat it whole."""
    world = cfg.layout.of("reward_model").world
    if cfg.reward_model.kind != "tagger" or world == 1:
        return None
    return (
        f"layout.reward_model runs {world} processes, and reward_model.kind=tagger trains in one: set "
        "layout.reward_model.processes to 1 (or remove layout.reward_model), or train reward_model.kind=generative"
    )


CHECKS = (tagger_on_too_few_items, tagger_in_several_processes)


def conflicts(cfg: PipelineConfig) -> list[str]:
    """Every clash in ``cfg`` (empty when the settings can work together)."""
    return [problem for check in CHECKS if (problem := check(cfg)) is not None]
