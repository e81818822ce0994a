"""The rollout, step 1 of a PPO step: which prompts the step draws, and one sampled response per sample.

A sample's random stream is keyed by (seed, step, global index g) (:func:`batch_rows` says which prompt g holds), so
however the batch is split over processes, or resumed, the same samples are drawn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from t2g_core.config.ppo import PPOConfig
from t2g_core.policy_prompts import render_policy_prompt
from t2g_core.ppo.sampling import response_mask_after_eos, sample_seed
from t2g_core.training import epoch_permutation

# (query_ids, query_mask, per-sample seeds, step) -> response ids (B, T)
Generate = Callable[[Tensor, Tensor, list[int], int], Tensor]


@dataclass
class Rollout:
    """One step's local share of the global batch; tensors are (B_local, ...)."""

    rows: list[dict]
    global_index: list[int]
    query_ids: Tensor
    query_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    has_eos: Tensor
    group: Tensor | None = None  # (B_local,) the prompt of each sample, numbered locally (group baselines)


def batch_rows(step: int, n_prompts: int, batch_size: int, seed: int, group_size: int = 1) -> list[int]:
    """Row numbers of step ``step``'s global batch: consecutive slices of a fresh permutation per pass over the data,
    each prompt repeated ``group_size`` times in a row (global index g holds prompt g // group_size of the step)."""
    n = batch_size // group_size
    out = []
    for pos in range(step * n, (step + 1) * n):
        data_epoch, offset = divmod(pos, n_prompts)
        out += [int(epoch_permutation(n_prompts, seed, data_epoch)[offset])] * group_size
    return out


def row_dict(row: pd.Series) -> dict:
    """A prompts-frame row as the dict the rollout and the reward source read (``meta`` parsed from JSON)."""
    d = row.to_dict()
    meta = d.get("meta")
    if isinstance(meta, str):
        d["meta"] = json.loads(meta)
    return d


def rollout(generate: Generate, tok, rows: list[dict], global_index: list[int], cfg: PPOConfig, step: int) -> Rollout:
    """Render and left-pad the prompts, sample a response each (tensors come back on the CPU); samples of one prompt
    (global index // group_size) share a local group id."""
    texts = [render_policy_prompt(tok, row["task"], row["prompt"]) for row in rows]
    enc = tok(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    seeds = [sample_seed(cfg.seed, step, g) for g in global_index]
    response_ids = generate(enc["input_ids"], enc["attention_mask"], seeds, step).cpu()
    response_mask, has_eos = response_mask_after_eos(response_ids, tok.eos_token_id)
    prompts = [g // cfg.group_size for g in global_index]
    group = torch.tensor([sorted(set(prompts)).index(p) for p in prompts], dtype=torch.long)
    return Rollout(
        rows, global_index, enc["input_ids"], enc["attention_mask"].bool(), response_ids, response_mask, has_eos, group
    )
