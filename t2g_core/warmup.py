"""Supervised warm-up of the policy: TRL ``SFTTrainer`` + LoRA on (rendered policy prompt -> reference response).

The pairs are the references of the training prompts, each prompt rendered exactly as PPO's rollouts and the
evaluation render it (``t2g_core.policy_prompts``); TRL's prompt/completion form keeps the loss on the reference and
its EOS only. Checkpoints (adapter, optimizer, scheduler, RNG states) go to ``<out>/checkpoints/checkpoint-N`` every
``warmup.save_steps``; a re-run after a kill resumes from the last one. At the end the LoRA is merged into the base
and the whole model is written with its tokenizer to ``<out>/policy`` by one rename: an ordinary model folder, so
PPO's fresh adapter starts from it and PPO's reference (that adapter disabled) is the warmed-up policy, the SFT model
as in RLHF practice.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from t2g_core.progress import Progress, no_progress
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
    from t2g_core.policy_prompts import render_policy_prompt

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


def _callback(tracker: Tracker, progress: Progress, losses: list[float]):
    from transformers import TrainerCallback

    class WarmupCallback(TrainerCallback):
        """Every Trainer log to the tracker as ``warmup/<name>``; ``progress("warm-up", step, max_steps)``."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            metrics = {f"warmup/{k}": float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
            if "warmup/loss" in metrics:
                losses.append(metrics["warmup/loss"])
            if metrics:
                tracker.log_metrics(metrics, step=int(state.global_step))

        def on_step_end(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                loss = {"loss": losses[-1]} if losses else {}
                progress("warm-up", int(state.global_step), int(state.max_steps), loss)

    return WarmupCallback()


def _sft_config(cfg, out_dir: Path, bf16: bool):
    import torch
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(out_dir / "checkpoints"),
        max_steps=cfg.steps,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        logging_steps=1,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=2,
        bf16=bf16,
        seed=cfg.seed,
        data_seed=cfg.seed,
        max_length=cfg.max_length,
        completion_only_loss=True,
        packing=False,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
    )


def make_trainer(cfg, policy: str | Path, pairs: WarmupPairs, out_dir: Path, *, dtype=None, callbacks=()):
    """An ``SFTTrainer`` on ``policy`` (a folder or Hub id, in ``dtype``: the resolved ``models.dtype``) wrapped in
    a fresh LoRA (``warmup.lora_*``); nothing trained yet."""
    import datasets
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import PrinterCallback
    from trl import SFTTrainer

    from t2g_core.models.loading import default_device, load_causal_lm, load_tokenizer, weights_dtype
    from t2g_core.reward_model.train import bf16_autocast

    datasets.disable_progress_bars()
    device = default_device()
    dtype = weights_dtype(dtype, device)
    tokenizer = load_tokenizer(policy, padding_side=None)
    model = load_causal_lm(policy, dtype=dtype, tokenizer=tokenizer, place=False)  # the Trainer places it
    lora = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )
    data = Dataset.from_dict({"prompt": [p for p, _ in pairs.pairs], "completion": [r for _, r in pairs.pairs]})
    trainer = SFTTrainer(
        model=model,
        args=_sft_config(cfg, out_dir, bf16_autocast(dtype, device)),
        train_dataset=data,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=list(callbacks),
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def last_checkpoint(out_dir: str | Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(out_dir) / "checkpoints"
    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def finished(out_dir: str | Path, cfg, policy: str | Path) -> WarmupResult | None:
    """The result of a completed warm-up of ``policy`` with ``cfg`` in ``out_dir``, or None."""
    meta_path = Path(out_dir) / "policy" / WARMUP_META
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("config") != cfg.model_dump(mode="json") or meta.get("start") != str(policy):
        return None
    return WarmupResult(
        policy_dir=meta_path.parent,
        global_step=int(meta["global_step"]),
        resumed_from=meta.get("resumed_from"),
        train_seconds=float(meta["train_seconds"]),
        n_pairs=int(meta["n_pairs"]),
        losses=list(meta.get("losses", [])),
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
    """LoRA SFT of ``policy`` on ``pairs`` for ``cfg.steps`` steps, merged and written to ``<out_dir>/policy``.
    With ``resume``, a finished warm-up in ``out_dir`` is returned as is and a killed one continues from its last
    checkpoint; ``callbacks`` are extra ``TrainerCallback`` objects."""
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
    losses: list[float] = []
    callback = _callback(tracker or NullTracker(), on_progress, losses)
    trainer = make_trainer(cfg, policy, pairs, out_dir, dtype=dtype, callbacks=[callback, *callbacks])
    resumed_from = last_checkpoint(out_dir) if resume else None
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resumed_from)
    seconds = time.perf_counter() - t0
    merged = trainer.model.merge_and_unload()  # base + LoRA as plain weights: the policy PPO starts from
    final = out_dir / "policy"
    tmp = staging_folder(final, writer_token(), create=True)
    merged.save_pretrained(str(tmp))
    trainer.processing_class.save_pretrained(str(tmp))
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
    (tmp / WARMUP_META).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    publish_folder(tmp, final)
    shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)  # the merged folder is the result
    return WarmupResult(final, meta["global_step"], resumed_from, seconds, len(pairs.pairs), losses)
