"""Building what the trainer consumes from pipeline inputs: the reward source and the task metric.

``PPOConfig.reward_source``: ``oracle`` = the task's programmatic critic (reference critic for summarization / QA,
sandboxed code critic for code), ``reward_model`` = the trained reward model's scorer, ``endpoint`` = a reward model
served over HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from t2g_core.critics.code import CodeCritic
from t2g_core.critics.reference import ReferenceCritic
from t2g_core.demo.summarization import summary_errors
from t2g_core.ppo.scoring import CriticSource, RewardSource
from t2g_core.reward_model.endpoint import EndpointScorer
from t2g_core.reward_model.scoring import load_scorer

if TYPE_CHECKING:
    import torch


ORACLE_CRITICS: dict[str, Callable[[], object]] = {
    "summarization": ReferenceCritic,
    "qa": ReferenceCritic,
    "code": CodeCritic,
}


def oracle_source(task: str) -> RewardSource:
    try:
        return CriticSource(ORACLE_CRITICS[task]())
    except KeyError:
        raise ValueError(f"no oracle critic for task {task!r}; expected one of {', '.join(ORACLE_CRITICS)}") from None


def reward_model_source(path: str | Path | None, rm_cfg=None, dtype: torch.dtype | None = None) -> RewardSource:
    """The trained reward model's scorer, its base weights in ``dtype`` (the resolved ``models.dtype``)."""
    if path is None or not Path(path).exists():
        raise FileNotFoundError(
            f"reward_source=reward_model needs a trained reward model; {path} does not exist (set "
            f"ppo.reward_model_path)"
        )
    return load_scorer(path, rm_cfg, dtype=dtype)


def make_reward_source(
    kind: str,
    task: str,
    *,
    reward_model_path: str | Path | None = None,
    rm_cfg=None,
    api_key: str | None = None,
    cache_dir: str | Path | None = None,
    dtype: torch.dtype | None = None,
) -> RewardSource:
    """The reward source ``kind`` for ``task``; ``api_key`` and ``cache_dir`` (its answers) serve ``endpoint``;
    ``dtype`` (a ``torch.dtype``; None: the ``auto`` rule) is the weights dtype of a ``reward_model`` scorer."""
    builders: dict[str, Callable[[], RewardSource]] = {
        "oracle": lambda: oracle_source(task),
        "reward_model": lambda: reward_model_source(reward_model_path, rm_cfg, dtype),
        "endpoint": lambda: EndpointScorer(rm_cfg, api_key=api_key, cache_dir=cache_dir),
    }
    if kind not in builders:
        raise ValueError(f"unknown reward_source {kind!r}; expected one of {', '.join(builders)}")
    return builders[kind]()


def summary_metrics(rows: list[dict], responses: list[str]) -> dict[str, list[float]]:
    """Per sample: error (1 - correct/K), imprecision (1 - correct/stated; 1: none stated), invented_rate."""
    out: dict[str, list[float]] = {"error": [], "imprecision": [], "invented_rate": []}
    for row, text in zip(rows, responses, strict=True):
        meta = row.get("meta") or {}
        meta = json.loads(meta) if isinstance(meta, str) else meta
        score = summary_errors(text, meta["facts"])
        out["error"].append(score.error)
        out["imprecision"].append(1.0 - score.precision)
        out["invented_rate"].append(score.invented_rate)
    return out


def task_metric_for(task: str, prompts: pd.DataFrame) -> Callable[[list[dict], list[str]], list[float]] | None:
    """The per-sample task error when the data carries ground truth for it (demo summarization), else None."""
    meta = prompts["meta"] if "meta" in prompts else None  # a user's file: meta all null, no facts to score by
    has_facts = meta is not None and meta.notna().all() and meta.astype(str).str.contains('"facts"').all()
    return summary_metrics if task == "summarization" and has_facts and len(prompts) else None
