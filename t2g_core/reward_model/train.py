"""Train the generative reward model: TRL ``SFTTrainer`` (a LoRA adapter, or every weight with
``reward_model.finetune=full``) through :mod:`t2g_core.sft`, loss on the completion only.

The dataset is prompt/completion (the rendered RM prompt, the target JSON + EOS). Checkpoints go to
``<out>/checkpoints/checkpoint-N`` every ``save_steps`` and a re-run resumes from the last; the adapter and tokenizer
go to ``<out>/adapter`` with ``rm_train.json``. The same code runs on CPU (float32) and GPU (bf16 when supported).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from t2g_core.progress import Progress, no_progress
from t2g_core.sft import TRAIN_META, RMTrainResult, finished_run, fit, log_callback, sft_trainer
from t2g_core.store import write_text_atomic
from t2g_core.tracking import NullTracker, Tracker

if TYPE_CHECKING:
    import torch


def _columns(rm_df: pd.DataFrame) -> tuple[dict[str, list[str]], dict[str, list[str]] | None]:
    """The prompt/completion columns of the train rows and of the validation rows (None when there are none)."""

    def columns(part: pd.DataFrame):
        return None if part.empty else {"prompt": part["rm_prompt"].tolist(), "completion": part["rm_target"].tolist()}

    train = columns(rm_df[rm_df["split"] == "train"])
    if train is None:
        raise ValueError("rm_data has no 'train' rows to learn from")
    return train, columns(rm_df[rm_df["split"] == "validation"])


def make_trainer(
    cfg,
    base_model: str | Path,
    rm_df: pd.DataFrame,
    out_dir: str | Path,
    *,
    tracker: Tracker | None = None,
    callbacks: Iterable = (),
    history=None,
    progress: bool = True,
    dtype: torch.dtype | None = None,
    on_progress: Progress = no_progress,
):
    """An ``SFTTrainer`` on the LoRA-wrapped base (nothing trained yet); exposed for tests and custom loops. The base
    loads in ``dtype`` (the resolved ``models.dtype``; None: the ``auto`` rule), which also sets the Trainer's mixed
    precision (:func:`t2g_core.sft.bf16_autocast`)."""
    base = str(Path(base_model).resolve()) if Path(base_model).exists() else str(base_model)
    train, validation = _columns(rm_df)
    log = log_callback(tracker or NullTracker(), on_progress, "rm", "reward model", [] if history is None else history)
    trainer = sft_trainer(
        cfg,
        base,
        out_dir,
        train,
        validation,
        section="reward_model",
        dtype=dtype,
        lora=cfg.finetune == "lora",
        callbacks=[log, *callbacks],
        quiet=not progress,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_eval_batch_size=cfg.batch_size,
        warmup_steps=cfg.warmup_ratio,  # a float < 1 is a ratio of the total steps
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        logging_steps=cfg.logging_steps,
        eval_strategy="steps" if validation is not None else "no",
        eval_steps=cfg.save_steps if validation is not None else None,
        gradient_checkpointing=cfg.gradient_checkpointing,
        max_length=cfg.max_prompt_tokens + cfg.max_target_tokens,
    )
    _save_embeddings_only_if_trained(trainer.model)
    return trainer


def _save_embeddings_only_if_trained(model) -> None:
    """Make every adapter the Trainer writes save the embedding layers only when they were trained (PEFT saves the
    whole vocabulary matrix whenever the vocabulary grew, although the base's rows are rebuilt identically at load);
    the Trainer passes no such argument, so it is bound on the model."""
    from functools import partial

    from t2g_core.models.loading import embeddings_trained

    if hasattr(model, "peft_config"):
        model.save_pretrained = partial(
            type(model).save_pretrained, model, save_embedding_layers=embeddings_trained(model)
        )


def train_rm(
    cfg,
    base_model: str | Path,
    rm_df: pd.DataFrame,
    out_dir: str | Path,
    *,
    tracker: Tracker | None = None,
    resume: bool = True,
    callbacks: Iterable = (),
    progress: bool = True,
    dtype: torch.dtype | None = None,
    on_progress: Progress = no_progress,
) -> RMTrainResult:
    """Fine-tune on ``rm_df`` (rm_data rows), the base in ``dtype`` (None: the ``auto`` rule); resume from
    ``<out>/checkpoints`` after a kill. With ``resume``, a finished run with the same config is returned as is."""
    out_dir = Path(out_dir)
    done = finished_run(out_dir, cfg) if resume else None
    if done is not None:
        return done
    history: list[dict[str, float]] = []
    trainer = make_trainer(
        cfg,
        base_model,
        rm_df,
        out_dir,
        tracker=tracker,
        callbacks=callbacks,
        history=history,
        progress=progress,
        dtype=dtype,
        on_progress=on_progress,
    )
    resumed_from, seconds = fit(trainer, out_dir, resume)
    adapter_dir = out_dir / "adapter"
    trainer.save_model(str(adapter_dir))  # by rank 0 of a launch
    n_val = int((rm_df["split"] == "validation").sum())
    meta: dict[str, Any] = {
        "base_model": str(Path(base_model).resolve()) if Path(base_model).exists() else str(base_model),
        "global_step": int(trainer.state.global_step),
        "resumed_from": resumed_from,
        "train_seconds": seconds,
        "n_train": int(len(rm_df) - n_val),
        "n_validation": n_val,
        "config": cfg.model_dump(mode="json"),
        "dtype": str(next(trainer.model.parameters()).dtype).removeprefix("torch."),
        "pad_token": trainer.processing_class.pad_token,
    }
    if trainer.is_world_process_zero():  # the other processes of a launch trained with it, and wait for it to write
        trainer.processing_class.save_pretrained(str(adapter_dir))
        write_text_atomic(adapter_dir / TRAIN_META, json.dumps(meta, indent=2))
    trainer.accelerator.wait_for_everyone()
    return RMTrainResult(
        adapter_dir=adapter_dir,
        checkpoint_dir=out_dir / "checkpoints",
        global_step=meta["global_step"],
        resumed_from=resumed_from,
        train_seconds=seconds,
        n_train=meta["n_train"],
        n_validation=n_val,
        history=history,
    )
