"""Supervised fine-tuning: the one wrapper of TRL's ``SFTTrainer`` that the warm-up (:mod:`t2g_core.warmup`) and the
generative reward model (:mod:`t2g_core.reward_model.train`) train through, and the record of a finished run that the
span tagger's own loop (:mod:`t2g_core.reward_model.tagger_train`) shares.

The data is TRL's prompt/completion form, so the loss is on the completion (and its EOS) only. A re-run after a kill
resumes from the last checkpoint (:func:`fit`); a finished run's JSON record beside its model (:func:`finished_meta`)
marks it complete only when it is whole and written for the same settings. Mixed precision follows the weights
(:func:`bf16_autocast`): bfloat16 weights on a GPU train under bf16 autocast, others in their own dtype.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t2g_core.config.lora import LoRA
from t2g_core.progress import Progress
from t2g_core.store import BrokenFile, read_json
from t2g_core.tracking import Tracker

if TYPE_CHECKING:
    import torch

KEEP_CHECKPOINTS = 2  # the one a run resumes from and the one being written
TRAIN_META = "rm_train.json"  # a trained reward model's record (both kinds), in its model folder


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


def bf16_autocast(dtype: torch.dtype, device) -> bool:
    """Whether the Trainer runs under bf16 autocast (``SFTConfig.bf16``): bfloat16 weights on a CUDA device with it."""
    import torch

    device = torch.device(device)
    return dtype == torch.bfloat16 and device.type == "cuda" and torch.cuda.is_bf16_supported()


def lora_config(lora: LoRA):
    """The peft config of a ``lora`` settings group (the warm-up's, the reward model's)."""
    from peft import LoraConfig

    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )


def log_callback(tracker: Tracker, on_progress: Progress, prefix: str, label: str, history: list[dict[str, float]]):
    """A ``TrainerCallback``: every Trainer log to the tracker as ``<prefix>/<name>`` and to ``history`` with its step;
    ``on_progress(label, step, max_steps, {loss})`` after every optimizer step."""
    from transformers import TrainerCallback

    class LogCallback(TrainerCallback):
        loss: float | None = None

        def on_log(self, args, state, control, logs=None, **kwargs):
            metrics = {f"{prefix}/{k}": float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
            if metrics:
                history.append({"step": float(state.global_step), **metrics})
                tracker.log_metrics(metrics, step=int(state.global_step))
            self.loss = metrics.get(f"{prefix}/loss", self.loss)

        def on_step_end(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                loss = {"loss": self.loss} if self.loss is not None else {}
                on_progress(label, int(state.global_step), int(state.max_steps), loss)

    return LogCallback()


def sft_trainer(
    cfg,
    base: str | Path,
    out_dir: str | Path,
    train: dict[str, list[str]],
    validation: dict[str, list[str]] | None = None,
    *,
    section: str,
    dtype: torch.dtype | None,
    lora: bool,
    callbacks: Iterable = (),
    quiet: bool = True,
    **args: Any,
):
    """An ``SFTTrainer`` on ``base`` (a folder or Hub id, in ``dtype``: the resolved ``models.dtype``; None: the
    ``auto`` rule), wrapped in a fresh LoRA (:func:`lora_config`) when ``lora``; nothing trained yet. ``train`` and
    ``validation`` are ``{"prompt": [...], "completion": [...]}`` columns; ``cfg`` (settings ``section``) gives the
    batch of a step (shared by the processes of a launch: :func:`per_process`), the optimizer, the checkpoint interval
    and the seed, ``args`` the rest of the ``SFTConfig``. ``quiet``: no progress bars."""
    import datasets
    import torch
    from accelerate import PartialState
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    from t2g_core.models.loading import default_device, load_causal_lm, load_tokenizer, weights_dtype

    joined = PartialState()  # the processes a launch joined (gloo on a host without CUDA), or this one alone
    world = joined.num_processes
    batch_size, grad_accum = per_process(cfg, section, world)
    if quiet:
        datasets.disable_progress_bars()
    device = default_device()  # where the Trainer places the model
    dtype = weights_dtype(dtype, device)
    tokenizer = load_tokenizer(base, padding_side=None)  # a pad token distinct from EOS (EOS stays in the loss)
    model = load_causal_lm(base, dtype=dtype, tokenizer=tokenizer, place=False)  # the Trainer places it
    config = SFTConfig(
        output_dir=str(Path(out_dir) / "checkpoints"),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=KEEP_CHECKPOINTS,
        bf16=bf16_autocast(dtype, device),
        seed=cfg.seed,
        data_seed=cfg.seed,
        completion_only_loss=True,
        packing=False,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
        use_cpu=joined.device.type == "cpu",  # the Trainer sets accelerate up again: as the launch joined
        ddp_find_unused_parameters=False,  # every trained weight is used: no extra pass over the graph per step
        **args,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=datasets.Dataset.from_dict(train),
        eval_dataset=datasets.Dataset.from_dict(validation) if validation is not None else None,
        processing_class=tokenizer,
        peft_config=lora_config(cfg.lora) if lora else None,
        callbacks=list(callbacks),
    )
    if quiet:
        trainer.remove_callback(PrinterCallback)
    if trainer.accelerator.num_processes != world:  # each process would train alone
        raise RuntimeError(f"{world} processes joined but the Trainer runs {trainer.accelerator.num_processes}")
    return trainer


def per_process(cfg, section: str, world: int) -> tuple[int, int]:
    """(batch per forward pass, accumulation steps) of each of ``world`` processes sharing an optimizer step of
    ``batch_size x grad_accum`` examples, so that the layout changes no result: the accumulation is shared when it
    divides, else the batch; refused when neither does."""
    if cfg.grad_accum % world == 0:
        return cfg.batch_size, cfg.grad_accum // world
    if cfg.batch_size % world == 0:
        return cfg.batch_size // world, cfg.grad_accum
    raise ValueError(
        f"{section}.batch_size {cfg.batch_size} x {section}.grad_accum {cfg.grad_accum} examples a step cannot be "
        f"shared by {world} processes: make {section}.grad_accum or {section}.batch_size a multiple of {world}"
    )


def fit(trainer, out_dir: str | Path, resume: bool) -> tuple[str | None, float]:
    """Train ``trainer`` (from the last checkpoint in ``out_dir`` with ``resume``); (that checkpoint, seconds)."""
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(out_dir) / "checkpoints"
    resumed_from = get_last_checkpoint(str(folder)) if resume and folder.is_dir() else None
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resumed_from)
    return resumed_from, time.perf_counter() - t0


def finished_meta(meta_path: str | Path, cfg, **expected) -> dict | None:
    """The record at ``meta_path`` of a completed run trained with ``cfg`` (and each ``expected`` value), or None: no
    record, one cut short or corrupt (the run is not complete, and trains again), or another run's."""
    try:
        meta = read_json(meta_path)
    except BrokenFile:
        return None
    if not isinstance(meta, dict) or meta.get("config") != cfg.model_dump(mode="json"):
        return None
    return meta if all(meta.get(k) == v for k, v in expected.items()) else None


def finished_run(out_dir: str | Path, cfg, folder: str = "adapter") -> RMTrainResult | None:
    """The result of a completed reward-model run in ``out_dir`` (model in ``folder``) trained with ``cfg``, or None."""
    meta = finished_meta(Path(out_dir) / folder / TRAIN_META, cfg)
    if meta is None:
        return None
    return RMTrainResult(
        adapter_dir=Path(out_dir) / folder,
        checkpoint_dir=Path(out_dir) / "checkpoints",
        global_step=int(meta["global_step"]),
        resumed_from=meta.get("resumed_from"),
        train_seconds=float(meta["train_seconds"]),
        n_train=int(meta["n_train"]),
        n_validation=int(meta["n_validation"]),
        history=[],
    )
