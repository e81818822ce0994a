"""Training the span tagger (:mod:`t2g_core.reward_model.tagger`): a plain loop of optimizer steps with checkpoints that
resumes exactly; why each trained part has its own gradient clip: docs/reward_model.md, "Training the span tagger".
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from t2g_core.models.loading import weights_dtype
from t2g_core.progress import Progress, no_progress
from t2g_core.reward_model.data import parse_rm_target
from t2g_core.reward_model.tagger import (
    GOOD,
    IGNORE,
    NEUTRAL,
    POOR,
    Encoded,
    SpanTagger,
    build_tagger,
    encode_pair,
    load_tagger,
    omission_counts,
    save_tagger,
    tagger_meta,
    token_classes,
)
from t2g_core.sft import KEEP_CHECKPOINTS, TRAIN_META, RMTrainResult, finished_run
from t2g_core.spans import AlignedSpan
from t2g_core.spans.locate import exact_spans
from t2g_core.store import write_text_atomic
from t2g_core.training import epoch_permutation, load_state, publish_folder, save_state, staging_folder, writer_token


class TaggerExample(NamedTuple):
    """One training example: the rendered policy prompt, the response, its located spans, and the char offsets
    where each item the annotator reports missing belonged (the end of the response when it gave no place)."""

    prompt_text: str
    response: str
    spans: list[AlignedSpan]
    missing_at: tuple[int | None, ...] = ()


# (ids, response start, offsets), token classes, omission counts per response token
Labelled = tuple[Encoded, list[int], list[int]]


def _right_padded(batch: list[Labelled], pad_id: int) -> dict[str, Tensor]:
    width = max(len(e.input_ids) for e, _, _ in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    omissions = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    for b, (e, classes, counts) in enumerate(batch):
        n = len(e.input_ids)
        ids[b, :n], mask[b, :n] = torch.tensor(e.input_ids), 1
        labels[b, e.start : n] = torch.tensor(classes, dtype=torch.long)
        omissions[b, e.start : n] = torch.tensor(counts, dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "omissions": omissions}


def _batch_order(n: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Example indices of optimizer step ``step``: consecutive slices of a fresh permutation per epoch."""
    per_epoch = max(1, math.ceil(n / batch_size))
    epoch, k = divmod(step, per_epoch)
    return epoch_permutation(n, seed, epoch)[k * batch_size : (k + 1) * batch_size].tolist()


def planned_steps(cfg, n_train: int) -> int:
    return cfg.max_steps if cfg.max_steps > 0 else max(1, math.ceil(cfg.epochs * n_train / cfg.batch_size))


def _schedule(optimizer, cfg, total: int):
    from transformers import get_scheduler

    return get_scheduler(
        cfg.lr_scheduler, optimizer, num_warmup_steps=int(cfg.warmup_ratio * total), num_training_steps=total
    )


def _save_checkpoint(folder: Path, model: SpanTagger, optimizer, scheduler, step: int) -> None:
    trainable = {k: v.detach().cpu() for k, v in model.named_parameters() if v.requires_grad}
    tmp = staging_folder(folder, writer_token(), create=True)
    save_state(
        {
            "step": step,
            "params": trainable,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": torch.get_rng_state(),  # LoRA dropout draws from it
        },
        tmp / "state.pt",
    )
    publish_folder(tmp, folder)


def _checkpoints(ckpt_dir: Path) -> list[Path]:
    """The completed checkpoint folders, oldest first (a staging folder is hidden and never matches)."""
    if not ckpt_dir.is_dir():
        return []
    return sorted(ckpt_dir.glob("step-*[0-9]"), key=lambda p: int(p.name.split("-")[1]))


def _restore(folder: Path, model: SpanTagger, optimizer, scheduler) -> int:
    state = load_state(folder / "state.pt", map_location="cpu")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in state["params"].items():
            params[name].copy_(value)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"])
    return int(state["step"])


def tagger_examples(rm_df, feedback_df, split: str = "train") -> list[TaggerExample]:
    """(policy prompt, response, located spans, missing anchors) for the ``split`` rows of tagger ``rm_data``."""
    responses = dict(zip(feedback_df["id"], feedback_df["response"], strict=True))
    out = []
    for row in rm_df[rm_df["split"] == split].itertuples(index=False):
        response = responses[row.id]
        target = parse_rm_target(row.rm_target)
        spans = exact_spans(response, target.located)
        out.append(TaggerExample(row.rm_prompt, response, spans, tuple(target.missing_at)))
    return out


def _encode_examples(examples, tokenizer, cfg, overlap: str) -> tuple[list[Labelled], int]:
    data, n_skipped = [], 0
    for example in examples:
        prompt_text, response, spans, missing_at = TaggerExample(*example)  # 3-tuples: no omissions
        e = encode_pair(tokenizer, prompt_text, response, cfg.max_prompt_tokens, cfg.max_target_tokens)
        if e.truncated:
            n_skipped += 1
            continue
        data.append((e, token_classes(e.offsets, spans, overlap), omission_counts(e.offsets, missing_at)))
    if not data:
        raise ValueError(f"tagger: no training example fits {cfg.max_prompt_tokens}+{cfg.max_target_tokens} tokens")
    return data, n_skipped


def clip_parts(model: SpanTagger, max_norm: float) -> float:
    """Clip the gradient of each trained part (the language model, the span heads, the omission head) to
    ``max_norm`` on its own; returns the norm of all before clipping."""
    parts = ([model.lm], [model.head, model.members], [model.omission])
    groups = [[p for m in part if m is not None for p in m.parameters() if p.requires_grad] for part in parts]
    norms = [torch.nn.utils.clip_grad_norm_(group, max_norm) for group in groups if group]
    return float(torch.stack(norms).pow(2).sum().sqrt())


# a response's features (n, 2d + 2), token classes (n,), omission counts (n,)
Cached = tuple[Tensor, Tensor, Tensor]


@torch.no_grad()
def cache_features(
    model: SpanTagger, data: list[Labelled], batch_size: int, device: str, on_progress: Progress = no_progress
) -> list[Cached] | None:
    """The features of each example's response tokens when the language model is frozen (in eval mode, as it
    scores), kept on the CPU: (2d + 2) x 4 bytes a response token, 148 MB for the 32,065 response tokens of 1000
    demo summaries on SmolLM2. None when any of its weights trains (the features would change every step)."""
    if any(p.requires_grad for p in model.lm.parameters()):
        return None
    was_training, out = model.training, []
    model.eval()
    for b in range(0, len(data), batch_size):
        chunk = data[b : b + batch_size]
        batch = _right_padded(chunk, 0)
        feats = model.features(batch["input_ids"].to(device), batch["attention_mask"].to(device)).cpu()
        for j, (e, classes, counts) in enumerate(chunk):
            n = len(e.input_ids)
            out.append((feats[j, e.start : n].clone(), torch.tensor(classes), torch.tensor(counts)))
        on_progress("reward model features", b + len(chunk), len(data))
    model.train(was_training)
    return out


@dataclass
class _Run:
    """What the training loop works on; ``cached``: the frozen language model's features of ``data``."""

    model: SpanTagger
    optimizer: torch.optim.Optimizer
    scheduler: object
    data: list[Labelled]
    total: int
    device: str
    cached: list[Cached] | None = None

    def loss(self, idx: list[int]) -> Tensor:
        """The training loss on examples ``idx``: through the language model, or the heads on cached features
        (the same mean over the batch's response tokens)."""
        if self.cached is None:
            batch = _right_padded([self.data[i] for i in idx], 0)
            return self.model(**{k: v.to(self.device) for k, v in batch.items()})["loss"]
        picked = [self.cached[i] for i in idx]
        feats, classes, counts = (torch.cat(part).to(self.device) for part in zip(*picked, strict=True))
        return self.model.heads(feats, classes, counts)["loss"]


def _loop(
    run: _Run, cfg, start: int, ckpt_dir: Path, tracker, progress: bool, on_progress: Progress = no_progress
) -> list[dict[str, float]]:
    """Optimizer steps ``start .. total``; returns the logged rows."""
    from tqdm.auto import tqdm

    history: list[dict[str, float]] = []
    run.model.train()
    bar = tqdm(total=run.total, initial=start, desc="tagger", disable=not progress, dynamic_ncols=True)
    for step in range(start, run.total):
        loss = run.loss(_batch_order(len(run.data), cfg.batch_size, step, cfg.seed))
        loss.backward()
        grad_norm = clip_parts(run.model, cfg.max_grad_norm)
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad(set_to_none=True)
        loss_value = float(loss.detach())
        if (step + 1) % cfg.logging_steps == 0 or step + 1 == run.total:
            row = {"rm/loss": loss_value, "rm/grad_norm": grad_norm, "rm/learning_rate": run.scheduler.get_last_lr()[0]}
            history.append({"step": float(step + 1), **row})
            if tracker is not None:
                tracker.log_metrics(row, step=step + 1)
        bar.update(1)
        bar.set_postfix(loss=f"{loss_value:.4f}")
        on_progress("reward model", step + 1, run.total, {"loss": loss_value})
        if (step + 1) % cfg.save_steps == 0 and step + 1 < run.total:
            _save_checkpoint(ckpt_dir / f"step-{step + 1}", run.model, run.optimizer, run.scheduler, step + 1)
            for old in _checkpoints(ckpt_dir)[:-KEEP_CHECKPOINTS]:
                shutil.rmtree(old, ignore_errors=True)
    bar.close()
    run.model.eval()
    return history


def fit_tagger(
    cfg,
    base: str | Path,
    examples: Sequence[TaggerExample | tuple[str, str, list[AlignedSpan]]],
    out_dir: str | Path,
    *,
    overlap: str = "poor_wins",
    tracker=None,
    resume: bool = True,
    progress: bool = False,
    dtype: torch.dtype | None = None,
    on_progress: Progress = no_progress,
):
    """Train a tagger on (prompt text, response, located spans) examples into ``<out_dir>/tagger``, the base in
    ``dtype`` (None: the ``auto`` rule), the heads in float32. Checkpoints every ``save_steps``; a re-run resumes and
    reproduces the uninterrupted run. Returns an :class:`~t2g_core.sft.RMTrainResult`."""
    out_dir, ckpt_dir = Path(out_dir), Path(out_dir) / "checkpoints"
    done = finished_run(out_dir, cfg, folder="tagger") if resume else None
    if done is not None:
        return done
    if not resume:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = build_tagger(base, cfg, weights_dtype(dtype, device))
    data, n_skipped = _encode_examples(examples, tokenizer, cfg, overlap)
    total = planned_steps(cfg, len(data))
    optimizer = torch.optim.AdamW(
        [p for p in model.to(device).parameters() if p.requires_grad],
        lr=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
    )
    run = _Run(model, optimizer, _schedule(optimizer, cfg, total), data, total, device)
    latest = (_checkpoints(ckpt_dir) or [None])[-1] if resume else None
    start = _restore(latest, model, optimizer, run.scheduler) if latest is not None else 0
    t0 = time.perf_counter()  # the features a frozen model gives, computed once, count as training time
    if start < total:
        run.cached = cache_features(model, data, cfg.score_batch_size, device, on_progress)
    history = _loop(run, cfg, start, ckpt_dir, tracker, progress, on_progress)
    seconds = time.perf_counter() - t0
    meta = {
        "kind": "tagger",
        "base_model": str(Path(base).resolve()) if Path(base).exists() else str(base),
        "finetune": cfg.finetune,
        "hidden_size": model.head[0].in_features // 2 - 1,
        "head_size": model.head[0].out_features,
        "heads": 1 + len(model.members),
        "classes": {"neutral": NEUTRAL, "good": GOOD, "poor": POOR},
        "max_omissions": model.max_omissions,
        "global_step": total,
        "resumed_from": str(latest) if latest else None,
        "train_seconds": seconds,
        "n_train": len(data),
        "n_skipped_too_long": n_skipped,
        "n_validation": 0,
        "config": cfg.model_dump(mode="json"),
    }
    folder = save_tagger(model, tokenizer, out_dir / "tagger", meta)
    write_text_atomic(folder / TRAIN_META, json.dumps(meta, indent=2))
    return RMTrainResult(folder, ckpt_dir, total, meta["resumed_from"], seconds, len(data), 0, history)


@dataclass(frozen=True)
class RefineResult:
    folder: Path
    losses: list[float]
    seconds: float
    n_examples: int


def refine_tagger(
    tagger_dir: str | Path,
    examples: Sequence[TaggerExample],
    out_dir: str | Path,
    cfg,
    *,
    steps: int,
    seed: int,
    learning_rate: float | None = None,
    overlap: str = "poor_wins",
    dtype: torch.dtype | None = None,
) -> RefineResult:
    """Continue training the tagger in ``tagger_dir`` on ``examples`` for ``steps`` optimizer steps (at
    ``learning_rate``, default ``cfg.learning_rate``) and write it to ``out_dir`` as a tagger folder. Data order and
    LoRA dropout are keyed by ``seed`` in a forked random state: the caller's is untouched (PPO's resume depends on
    it)."""
    out_dir = Path(out_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model, tokenizer = load_tagger(tagger_dir, device=device, dtype=weights_dtype(dtype, device), trainable=True)
        data, _ = _encode_examples(examples, tokenizer, cfg, overlap)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=learning_rate or cfg.learning_rate, weight_decay=cfg.weight_decay)
        cached = cache_features(model, data, cfg.score_batch_size, device)  # None unless the base is frozen
        run = _Run(model, optimizer, None, data, steps, device, cached)
        losses = []
        for step in range(steps):
            loss = run.loss(_batch_order(len(data), cfg.batch_size, step, seed))
            loss.backward()
            clip_parts(model, cfg.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
        model.eval()
    meta = tagger_meta(tagger_dir) | {"refined_from": str(tagger_dir), "refine_steps": steps, "n_refine": len(data)}
    tmp = staging_folder(out_dir, writer_token(), create=True)
    save_tagger(model, tokenizer, tmp, meta)
    publish_folder(tmp, out_dir)
    return RefineResult(out_dir, losses, time.perf_counter() - t0, len(data))
