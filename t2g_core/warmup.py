"""Supervised warm-up of the policy: LoRA SFT (:mod:`t2g_core.sft`) on (rendered policy prompt -> reference response).

The pairs are the references of the training prompts, each prompt rendered exactly as PPO's rollouts and the
evaluation render it (``t2g_core.policy_prompts``). A re-run after a kill resumes from the last checkpoint. At the end
the LoRA is merged into the base and written with its tokenizer to ``<out>/policy`` by one rename: an ordinary model
folder, so PPO's fresh adapter starts from it and PPO's reference (that adapter disabled) is the warmed-up policy.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from t2g_core.policy_prompts import render_policy_prompt
from t2g_core.progress import Progress, no_progress
from t2g_core.sft import finished_meta, fit, log_callback, sft_trainer
from t2g_core.tracking import NullTracker, Tracker

if TYPE_CHECKING:
    import torch

WARMUP_META = "warmup.json"


@dataclass
class WarmupPairs:
    """What the warm-up trains on: (rendered prompt, reference) pairs and the rows left out, by reason."""

    pairs: list[tuple[str, str]]
    ids: list[str]
    no_reference: int = 0
    too_long: int = 0


@dataclass
class WarmupResult:
    policy_dir: Path  # the merged model folder PPO starts from
    global_step: int
    resumed_from: str | None
    train_seconds: float
    n_pairs: int
    losses: list[float] = field(default_factory=list)  # the training loss at each logged step


def warmup_pairs(train: pd.DataFrame, tokenizer, cfg) -> WarmupPairs:
    """The (rendered prompt, reference) pairs of the training rows ``train`` (feedback schema): rows without a
    reference are left out, so are pairs above ``cfg.max_length`` tokens (reference and EOS included) and repeated
    (prompt, reference) pairs; at most ``cfg.max_items`` rows are used (0 = all)."""
    has_ref = train["reference"].notna() & (train["reference"].astype(str).str.strip() != "")
    rows = train[has_ref].drop_duplicates(subset=["prompt", "reference"])
    if cfg.max_items:
        rows = rows.head(cfg.max_items)
    out = WarmupPairs(pairs=[], ids=[], no_reference=int((~has_ref).sum()))
    for row in rows.itertuples(index=False):
        prompt = render_policy_prompt(tokenizer, row.task, row.prompt)
        n_tokens = len(tokenizer(prompt + row.reference + tokenizer.eos_token, add_special_tokens=False)["input_ids"])
        if n_tokens > cfg.max_length:
            out.too_long += 1
            continue
        out.pairs.append((prompt, row.reference))
        out.ids.append(str(row.id))
    return out


def finished(out_dir: str | Path, cfg, policy: str | Path) -> WarmupResult | None:
    """The result of a completed warm-up of ``policy`` with ``cfg`` in ``out_dir``, or None (it trains again)."""
    meta = finished_meta(Path(out_dir) / "policy" / WARMUP_META, cfg, start=str(policy))
    if meta is None:
        return None
    steps, seconds, losses = int(meta["global_step"]), float(meta["train_seconds"]), list(meta.get("losses", []))
    return WarmupResult(
        Path(out_dir) / "policy", steps, meta.get("resumed_from"), seconds, int(meta["n_pairs"]), losses
    )


def train_warmup(
    cfg,
    policy: str | Path,
    pairs: WarmupPairs,
    out_dir: str | Path,
    *,
    dtype: torch.dtype | None = None,
    tracker: Tracker | None = None,
    on_progress: Progress = no_progress,
    resume: bool = True,
    callbacks: Iterable = (),
) -> WarmupResult:
    """LoRA SFT of ``policy`` on ``pairs`` for ``cfg.steps`` steps, merged and written to ``<out_dir>/policy``; with
    ``resume`` a finished warm-up is returned as is and a killed one continues (``callbacks``: extra ones)."""
    from t2g_core.training import publish_folder, staging_folder, writer_token

    out_dir = Path(out_dir)
    if not pairs.pairs:
        raise ValueError(
            f"warm-up: no (prompt, reference) pair to train on ({pairs.no_reference} training rows without a "
            f"reference, {pairs.too_long} above warmup.max_length tokens)"
        )
    done = finished(out_dir, cfg, policy) if resume else None
    if done is not None:
        return done
    history: list[dict[str, float]] = []
    trainer = sft_trainer(
        cfg,
        policy,
        out_dir,
        {"prompt": [p for p, _ in pairs.pairs], "completion": [r for _, r in pairs.pairs]},
        section="warmup",
        dtype=dtype,
        lora=True,
        callbacks=[log_callback(tracker or NullTracker(), on_progress, "warmup", "warm-up", history), *callbacks],
        max_steps=cfg.steps,
        logging_steps=1,
        max_length=cfg.max_length,
    )
    resumed_from, seconds = fit(trainer, out_dir, resume)
    losses = [h["warmup/loss"] for h in history if "warmup/loss" in h]  # the training loss at each logged step
    merged = trainer.model.merge_and_unload()  # base + LoRA as plain weights: the policy PPO starts from
    final = out_dir / "policy"
    meta = {
        "start": str(policy),
        "global_step": int(trainer.state.global_step),
        "resumed_from": resumed_from,
        "train_seconds": seconds,
        "n_pairs": len(pairs.pairs),
        "left_out": {"no_reference": pairs.no_reference, "too_long": pairs.too_long},
        "losses": losses,
        "config": cfg.model_dump(mode="json"),
        "dtype": str(next(merged.parameters()).dtype).removeprefix("torch."),
    }
    if trainer.is_world_process_zero():  # the other processes of a launch trained with it, and wait for it to write
        tmp = staging_folder(final, writer_token(), create=True)
        merged.save_pretrained(str(tmp))
        trainer.processing_class.save_pretrained(str(tmp))
        (tmp / WARMUP_META).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        publish_folder(tmp, final)
        shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)  # the merged folder is the result
    trainer.accelerator.wait_for_everyone()
    return WarmupResult(final, meta["global_step"], resumed_from, seconds, len(pairs.pairs), losses)
