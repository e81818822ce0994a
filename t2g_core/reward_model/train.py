"""Train the generative reward model: TRL ``SFTTrainer`` (a PEFT LoRA adapter, or every weight with
``reward_model.finetune=full``), loss on the completion only.

The dataset is TRL's prompt/completion form (``prompt`` = the rendered RM prompt, ``completion`` = the target
JSON + EOS), so TRL masks every prompt token out of the loss (labels -100) and pads on the right for training.
Checkpoints (adapter, optimizer, scheduler, RNG states, step) go to ``<out>/checkpoints/checkpoint-N`` every
``save_steps``; a re-run after a kill resumes from the last one. The final adapter and tokenizer go to
``<out>/adapter`` with ``rm_train.json`` (base model, step, config, dtype). The base is a folder or a Hub id
(``@revision``) loaded in ``models.dtype`` (the ``torch.dtype`` the stage resolved) with the shared pad-token policy
(``t2g_core.models.loading``); the same code runs on CPU (float32) and on a GPU (bf16 when supported).

Mixed precision follows the weights, so one setting decides both (:func:`bf16_autocast`): bfloat16 weights on a GPU
train under bf16 autocast (the float32 LoRA matmuls run in bf16 like the base); float32 weights train in float32,
float16 weights as loaded, and on the CPU every layer computes in its own weights' dtype.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from t2g_core.progress import Progress, no_progress
from t2g_core.store import write_text_atomic
from t2g_core.tracking import NullTracker, Tracker

if TYPE_CHECKING:
    import torch

TRAIN_META = "rm_train.json"


@dataclass
class RMTrainResult:
    adapter_dir: Path
    checkpoint_dir: Path
    global_step: int
    resumed_from: str | None
    train_seconds: float
    n_train: int
    n_validation: int
    history: list[dict[str, float]] = field(default_factory=list)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def bf16_autocast(dtype: torch.dtype, device) -> bool:
    """Whether the Trainer runs under bf16 autocast (``SFTConfig.bf16``) for base weights in ``dtype`` on
    ``device``: bfloat16 weights on a CUDA device that supports bf16."""
    import torch

    device = torch.device(device)
    return dtype == torch.bfloat16 and device.type == "cuda" and torch.cuda.is_bf16_supported()


def _tracker_callback(tracker: Tracker, history: list[dict[str, float]]):
    from transformers import TrainerCallback

    class TrackerCallback(TrainerCallback):
        """Forward every Trainer log (loss, learning_rate, grad_norm, eval_loss, ...) to the tracker."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            metrics = {f"rm/{k}": float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
            if metrics:
                history.append({"step": float(state.global_step), **metrics})
                tracker.log_metrics(metrics, step=int(state.global_step))

    return TrackerCallback()


def _progress_callback(progress: Progress):
    from transformers import TrainerCallback

    class ProgressCallback(TrainerCallback):
        """``progress("reward model", step, max_steps, {loss})`` after every optimizer step."""

        loss: float | None = None

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and isinstance(logs.get("loss"), (int, float)):
                self.loss = float(logs["loss"])

        def on_step_end(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                metrics = {"loss": self.loss} if self.loss is not None else {}
                progress("reward model", int(state.global_step), int(state.max_steps), metrics)

    return ProgressCallback()


def _datasets(rm_df: pd.DataFrame):
    from datasets import Dataset

    def to_ds(part: pd.DataFrame):
        if part.empty:
            return None
        return Dataset.from_dict({"prompt": part["rm_prompt"].tolist(), "completion": part["rm_target"].tolist()})

    train = rm_df[rm_df["split"] == "train"]
    if train.empty:
        raise ValueError("rm_data has no 'train' rows to learn from")
    return to_ds(train), to_ds(rm_df[rm_df["split"] == "validation"])


def _sft_config(cfg, out_dir: Path, has_eval: bool, bf16: bool):
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(out_dir / "checkpoints"),
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup_ratio,  # a float < 1 is a ratio of the total steps
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        logging_steps=cfg.logging_steps,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        eval_strategy="steps" if has_eval else "no",
        eval_steps=cfg.save_steps if has_eval else None,
        bf16=bf16,
        gradient_checkpointing=cfg.gradient_checkpointing,
        seed=cfg.seed,
        data_seed=cfg.seed,
        max_length=cfg.max_prompt_tokens + cfg.max_target_tokens,
        completion_only_loss=True,
        packing=False,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=_cuda(),
    )


def lora_config(cfg):
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )


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
    precision (:func:`bf16_autocast`). The tokenizer gets a pad token distinct from EOS (EOS must stay in the loss)."""
    import datasets
    from transformers import PrinterCallback
    from trl import SFTTrainer

    from t2g_core.models.loading import default_device, load_causal_lm, load_tokenizer, weights_dtype

    if not progress:
        datasets.disable_progress_bars()

    base = str(Path(base_model).resolve()) if Path(base_model).exists() else str(base_model)
    out_dir = Path(out_dir)
    device = default_device()  # where the Trainer places the model
    dtype = weights_dtype(dtype, device)
    tokenizer = load_tokenizer(base, padding_side=None)
    bf16 = bf16_autocast(dtype, device)
    args = _sft_config(cfg, out_dir, has_eval=False, bf16=bf16)
    model = load_causal_lm(base, dtype=dtype, tokenizer=tokenizer, place=False)  # the Trainer places it
    train_ds, eval_ds = _datasets(rm_df)
    if eval_ds is not None:
        args = _sft_config(cfg, out_dir, has_eval=True, bf16=bf16)
    all_callbacks = [
        _tracker_callback(tracker or NullTracker(), history if history is not None else []),
        _progress_callback(on_progress),
        *callbacks,
    ]
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        peft_config=lora_config(cfg) if cfg.finetune == "lora" else None,
        callbacks=all_callbacks,
    )
    if not progress:
        trainer.remove_callback(PrinterCallback)
    _save_embeddings_only_if_trained(trainer.model)
    return trainer


def _save_embeddings_only_if_trained(model) -> None:
    """Make every adapter the Trainer writes (checkpoints and the final one) save the embedding layers only when they
    were trained: PEFT's default saves them whenever the vocabulary grew (an added pad token), the whole vocabulary
    matrix in each adapter, although the base's rows are rebuilt identically at load (``t2g_core.models.loading``).
    The Trainer calls ``model.save_pretrained`` without that argument, so it is bound on the model here."""
    from functools import partial

    from t2g_core.models.loading import embeddings_trained

    if hasattr(model, "peft_config"):
        model.save_pretrained = partial(
            type(model).save_pretrained, model, save_embedding_layers=embeddings_trained(model)
        )


def last_checkpoint(out_dir: str | Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    ckpt = Path(out_dir) / "checkpoints"
    return get_last_checkpoint(str(ckpt)) if ckpt.is_dir() else None


def finished_run(out_dir: str | Path, cfg, folder: str = "adapter") -> RMTrainResult | None:
    """The result of a completed run in ``out_dir`` (its model in ``<out_dir>/<folder>``) trained with ``cfg``, or
    None (also when its record was cut short: the run is not complete, and trains again)."""
    from t2g_core.store import BrokenFile, read_json

    meta_path = Path(out_dir) / folder / TRAIN_META
    if not meta_path.exists():
        return None
    try:
        meta = read_json(meta_path)
    except BrokenFile:
        return None
    if not isinstance(meta, dict) or meta.get("config") != cfg.model_dump(mode="json"):
        return None
    return RMTrainResult(
        adapter_dir=meta_path.parent,
        checkpoint_dir=Path(out_dir) / "checkpoints",
        global_step=int(meta["global_step"]),
        resumed_from=meta.get("resumed_from"),
        train_seconds=float(meta["train_seconds"]),
        n_train=int(meta["n_train"]),
        n_validation=int(meta["n_validation"]),
        history=[],
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
    """Fine-tune a LoRA adapter on ``rm_df`` (rm_data rows), the base in ``dtype`` (the resolved ``models.dtype``;
    None: the ``auto`` rule); resume from ``<out>/checkpoints`` if a run was killed.

    With ``resume``, a finished run in ``out_dir`` with the same config is returned as is (nothing is retrained).
    """
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
    resumed_from = last_checkpoint(out_dir) if resume else None
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resumed_from)
    seconds = time.perf_counter() - t0
    adapter_dir = out_dir / "adapter"
    trainer.save_model(str(adapter_dir))
    trainer.processing_class.save_pretrained(str(adapter_dir))
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
    write_text_atomic(adapter_dir / TRAIN_META, json.dumps(meta, indent=2))
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
