"""Tiny causal LMs built from scratch: a byte-level BPE tokenizer with a chat template, a small Llama or GPT-2,
and a short warm start, all saved as ordinary Hugging Face folders (``from_pretrained`` loads them).

Tokenizer conventions (the traps they avoid are noted):
- special tokens ``<|bos|>``, ``<|eot|>`` (end of turn = EOS, so ``generate`` stops at the end of the assistant turn),
  ``<|pad|>`` (distinct from EOS, so masking padding never masks the real end of a response) and role markers;
- no post-processor adds special tokens: the chat template writes BOS itself, so ``tokenizer(rendered_text)`` never
  doubles it (render with the template, tokenize with or without ``add_special_tokens``: the ids are the same);
- offsets are trimmed of the leading space byte-level BPE folds into a word (``" Paris"`` maps to ``Paris``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from t2g_core.config.models import ModelsConfig, TinyModelConfig
from t2g_core.progress import Progress, as_progress

BOS, EOS, PAD = "<|bos|>", "<|eot|>", "<|pad|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, *ROLE_TOKENS)
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
BUILD_VERSION = "1"  # bump when the build recipe changes so cached folders are rebuilt


# --------------------------------------------------------------------------------------------- tokenizer
def train_tokenizer(texts: Sequence[str], vocab_size: int, out_dir: str | Path, *, pad: bool = True, reserved: int = 0):
    """Train a byte-level BPE on ``texts`` and save it as a fast-tokenizer folder; returns the loaded tokenizer.

    ``pad=False, reserved=N`` gives a Llama-3-style tokenizer: no pad token, EOS != BOS, and N unused
    ``<|reserved_special_token_i|>`` tokens (the pad-token policy of ``t2g_core.models.loading`` picks one)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("train_tokenizer: the corpus is empty")
    reserved_tokens = [f"<|reserved_special_token_{i}|>" for i in range(reserved)]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[t for t in SPECIAL_TOKENS if pad or t != PAD] + reserved_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer, length=len(texts))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=BOS, eos_token=EOS, pad_token=PAD if pad else None, model_max_length=1_000_000
    )
    fast.add_special_tokens({"additional_special_tokens": [*ROLE_TOKENS, *reserved_tokens]})
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"  # decoder-only generation pads on the left
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    return AutoTokenizer.from_pretrained(out_dir)


# --------------------------------------------------------------------------------------------- model
def _model_config(cfg: TinyModelConfig, tokenizer):
    from transformers import GPT2Config, LlamaConfig

    ids = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if cfg.architecture == "gpt2":
        return GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=cfg.hidden_size,
            n_layer=cfg.num_layers,
            n_head=cfg.num_heads,
            n_positions=cfg.max_positions,
            tie_word_embeddings=True,
            **ids,
        )
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size or 4 * cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        **ids,
    )


def build_tiny_model(out_dir: str | Path, tokenizer_dir: str | Path, cfg: TinyModelConfig | None = None) -> Path:
    """Randomly initialise a small causal LM sized by ``cfg`` for the tokenizer in ``tokenizer_dir``.

    Saves model (safetensors), generation config and tokenizer into ``out_dir`` and returns it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    cfg = cfg or TinyModelConfig()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(cfg.seed)
    model = AutoModelForCausalLM.from_config(_model_config(cfg, tokenizer))
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=64,
    )
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


# --------------------------------------------------------------------------------------------- warm start
@dataclass(frozen=True)
class WarmStartResult:
    losses: list[float]
    seconds: float


def _lm_batches(tokenizer, texts: Sequence[str], block: int, batch_size: int, gen):
    """Yield (input_ids, labels, attention_mask) windows of a packed stream ``<bos> text <eot> <bos> text <eot>
    ...``."""
    import torch

    stream: list[int] = []
    for text in texts:
        stream += [
            tokenizer.bos_token_id,
            *tokenizer(text, add_special_tokens=False)["input_ids"],
            tokenizer.eos_token_id,
        ]
    data = torch.tensor(stream, dtype=torch.long)
    block = min(block, len(data) - 1)
    if block < 2:
        raise ValueError("warm_start: the corpus is too small to pack")
    while True:
        starts = torch.randint(0, len(data) - block, (batch_size,), generator=gen)
        x = torch.stack([data[s : s + block] for s in starts.tolist()])  # (B, T)
        yield x, x.clone(), torch.ones_like(x)


def _sft_examples(tokenizer, pairs: Sequence[tuple[str, str]], max_length: int) -> list[tuple[list[int], int]]:
    """Token ids of ``prompt + response + <eot>`` and the prompt length (the loss starts after it)."""
    out = []
    for prompt, response in pairs:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        r = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = (p + r)[:max_length]
        if len(p) < len(ids):
            out.append((ids, len(p)))
    if not out:
        raise ValueError("warm_start: no (prompt, response) pair fits in max_length")
    return out


def _sft_batches(tokenizer, pairs: Sequence[tuple[str, str]], max_length: int, batch_size: int, gen):
    """Yield right-padded (input_ids, labels, attention_mask); labels are -100 on the prompt and on padding."""
    import torch

    examples = _sft_examples(tokenizer, pairs, max_length)
    while True:
        pick = torch.randint(0, len(examples), (batch_size,), generator=gen).tolist()
        width = max(len(examples[i][0]) for i in pick)
        ids = torch.full((batch_size, width), tokenizer.pad_token_id, dtype=torch.long)  # (B, T)
        labels = torch.full((batch_size, width), -100, dtype=torch.long)
        mask = torch.zeros((batch_size, width), dtype=torch.long)
        for row, i in enumerate(pick):
            seq, n_prompt = examples[i]
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, n_prompt : len(seq)] = torch.tensor(seq[n_prompt:])
            mask[row, : len(seq)] = 1
        yield ids, labels, mask


def warm_start(
    model_dir: str | Path,
    texts_or_pairs: Sequence[str] | Sequence[tuple[str, str]],
    cfg: TinyModelConfig | None = None,
    *,
    steps: int | None = None,
    lr: float | None = None,
    batch_size: int | None = None,
    block_size: int = 128,
    out_dir: str | Path | None = None,
    progress: Progress | bool = True,
) -> WarmStartResult:
    """Train the model in ``model_dir`` and save it to ``out_dir`` (default: in place).

    Plain strings: language-model pretraining on packed windows. ``(prompt, response)`` pairs: supervised training with
    the loss on the response (and its ``<eot>``) only; the prompt should already be rendered with the chat template.
    AdamW with a one-cycle schedule; the caller sets torch's thread count.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = cfg or TinyModelConfig()
    steps = cfg.warm_start_steps if steps is None else steps
    lr = cfg.warm_start_lr if lr is None else lr
    batch_size = batch_size or cfg.warm_start_batch_size
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    is_pairs = len(texts_or_pairs) > 0 and not isinstance(texts_or_pairs[0], str)
    batches = (
        _sft_batches(tokenizer, texts_or_pairs, cfg.max_positions, batch_size, gen)
        if is_pairs
        else _lm_batches(tokenizer, texts_or_pairs, min(block_size, cfg.max_positions), batch_size, gen)
    )
    desc = "policy SFT" if is_pairs else "LM warm start"
    losses = _train_loop(model, batches, steps, lr, as_progress(progress), desc=desc)
    target = Path(out_dir) if out_dir is not None else Path(model_dir)
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    return WarmStartResult(losses=losses, seconds=time.perf_counter() - t0)


def _train_loop(model, batches, steps: int, lr: float, progress: Progress, desc: str) -> list[float]:
    import torch

    if steps <= 0:
        return []
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, steps // 10)  # linear warm-up, then cosine decay to 10 % of lr
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda i: (
            (i + 1) / warmup
            if i < warmup
            else 0.1 + 0.45 * (1 + math.cos(math.pi * (i - warmup) / max(1, steps - warmup)))
        ),
    )
    losses: list[float] = []
    for i in range(steps):
        ids, labels, mask = next(batches)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        progress(desc, i + 1, steps, {"loss": losses[-1]} if math.isfinite(losses[-1]) else None)
    model.eval()
    return losses


# --------------------------------------------------------------------------------------------- demo models
@dataclass(frozen=True)
class DemoModels:
    """Folders (or Hugging Face ids) of the reward-model base and of the warm-started policy."""

    base: Path
    policy: Path


def _frame_digest(df: pd.DataFrame) -> str:
    payload = df.to_json(orient="records", force_ascii=False).encode()
    return hashlib.sha256(payload).hexdigest()


def demo_models_key(cfg: ModelsConfig, feedback_df: pd.DataFrame) -> str:
    """Hash of the build recipe version, the tiny-model config and the feedback content."""
    parts = [BUILD_VERSION, cfg.tiny.model_dump_json(), _frame_digest(feedback_df)]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def ensure_demo_models(
    models_dir: str | Path,
    cfg: ModelsConfig,
    feedback_df: pd.DataFrame,
    *,
    progress: Progress | bool = True,
    log: Callable[[str], None] | None = None,
    rebuild: bool = False,
) -> DemoModels:
    """Build (once) the tiny base LM and the warm-started policy for ``feedback_df``'s task; reuse them afterwards.

    ``models_dir/tiny-<key>/{base,policy}`` with key = hash(config, data). The build happens in a temporary folder that
    is renamed into place, so an interrupted build never leaves a folder that looks complete. Models given as a
    Hugging Face id or folder (``cfg.policy`` / ``cfg.reward_model_base`` not ``"tiny"``) are returned as they are.
    ``rebuild`` builds again and swaps the new folder in for a finished one.
    """
    if cfg.policy != "tiny" and cfg.reward_model_base != "tiny":
        return DemoModels(base=Path(cfg.reward_model_base), policy=Path(cfg.policy))
    models_dir = Path(models_dir)
    final = models_dir / f"tiny-{demo_models_key(cfg, feedback_df)}"
    if rebuild or not (final / "build.json").exists():
        tmp = models_dir / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        tmp.mkdir(parents=True)
        try:
            _build_demo_models(tmp, cfg.tiny, feedback_df, progress=as_progress(progress), log=log or (lambda _m: None))
            if rebuild and final.exists():  # swap: the finished folder is replaced only once the new one is complete
                os.rename(final, old := tmp.with_name(tmp.name + "-old"))
                shutil.rmtree(old)
            try:
                os.rename(tmp, final)
            except OSError:  # another process finished the same key first
                if not (final / "build.json").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    base = final / "base" if cfg.reward_model_base == "tiny" else Path(cfg.reward_model_base)
    policy = final / "policy" if cfg.policy == "tiny" else Path(cfg.policy)
    return DemoModels(base=base, policy=policy)


def _main_task(feedback_df: pd.DataFrame) -> str:
    if feedback_df.empty:
        raise ValueError("ensure_demo_models: the feedback frame is empty")
    return str(feedback_df["task"].mode().iloc[0])


def _policy_pairs(
    task: str, feedback_df: pd.DataFrame, cfg: TinyModelConfig, p_halluc: float, seed: int
) -> list[tuple[str, str]]:
    """(prompt, target response) pairs for the policy's supervised warm start.

    Summarization: fresh synthetic posts whose summaries get each fact wrong with probability ``p_halluc``. Other
    tasks: the feedback's references (or responses when no reference exists).
    """
    if task == "summarization":
        from t2g_core.demo.summarization import warm_start_pairs

        return warm_start_pairs(cfg.policy_sft_examples, seed=seed, p_halluc=p_halluc)
    rows = feedback_df[feedback_df["task"] == task]
    return [
        (r.prompt, r.reference if isinstance(r.reference, str) and r.reference else r.response)
        for r in rows.itertuples()
    ]


def _train_policy(
    root: Path, tokenizer, task: str, feedback_df: pd.DataFrame, cfg: TinyModelConfig, *, progress, log
) -> dict:
    """Two supervised phases from the base LM: (1) clean targets, so the copy-a-value-from-the-post circuit forms
    quickly; (2) for summarization, targets with each fact wrong at ``cfg.p_halluc``, so the policy keeps the template
    and the lookup but states wrong values often enough for PPO to have errors to remove."""
    from t2g_core.policy_prompts import render_policy_prompt

    def rendered(pairs):
        return [(render_policy_prompt(tokenizer, task, p), r) for p, r in pairs]

    clean = rendered(_policy_pairs(task, feedback_df, cfg, 0.0, cfg.seed + 1000))
    sft = warm_start(
        root / "base",
        clean,
        cfg,
        steps=cfg.policy_sft_steps,
        lr=cfg.policy_sft_lr,
        batch_size=cfg.policy_sft_batch_size,
        out_dir=root / "policy",
        progress=progress,
    )
    log(f"policy SFT (clean): {len(sft.losses)} steps in {sft.seconds:.1f} s, loss {_first_last(sft.losses)}")
    info = {"sft_losses": _first_last(sft.losses), "n_policy_pairs": len(clean)}
    if task == "summarization" and cfg.policy_noise_steps > 0:
        noisy = rendered(_policy_pairs(task, feedback_df, cfg, cfg.p_halluc, cfg.seed + 2000))
        noise = warm_start(
            root / "policy",
            noisy,
            cfg,
            steps=cfg.policy_noise_steps,
            lr=cfg.policy_noise_lr,
            batch_size=cfg.policy_sft_batch_size,
            progress=progress,
        )
        log(
            f"policy SFT (p_halluc={cfg.p_halluc}): {len(noise.losses)} steps in {noise.seconds:.1f} s, loss "
            f"{_first_last(noise.losses)}"
        )
        info["noise_losses"] = _first_last(noise.losses)
    return info


def _build_demo_models(root: Path, cfg: TinyModelConfig, feedback_df: pd.DataFrame, *, progress: Progress, log) -> None:
    from t2g_core.demo import demo_corpus

    t0, c0 = time.perf_counter(), time.process_time()
    task = _main_task(feedback_df)
    pairs = _policy_pairs(task, feedback_df, cfg, cfg.p_halluc, cfg.seed + 3000)
    corpus = demo_corpus(feedback_df) + [f"{p}\n{r}" for p, r in pairs[: len(feedback_df) * 4]]
    tokenizer = train_tokenizer(corpus, cfg.vocab_size, root / "tokenizer")
    log(f"tokenizer: {len(tokenizer)} tokens from {len(corpus)} texts")
    build_tiny_model(root / "base", root / "tokenizer", cfg)
    lm = warm_start(root / "base", corpus, cfg, block_size=cfg.warm_start_block_size, progress=progress)
    log(f"base LM warm start: {len(lm.losses)} steps in {lm.seconds:.1f} s, loss {_first_last(lm.losses)}")
    info = _train_policy(root, tokenizer, task, feedback_df, cfg, progress=progress, log=log)
    shutil.rmtree(root / "tokenizer")
    info.update(
        {
            "task": task,
            "config": cfg.model_dump(mode="json"),
            "seconds": round(time.perf_counter() - t0, 2),
            "cpu_seconds": round(time.process_time() - c0, 2),
            "lm_losses": _first_last(lm.losses),
        }
    )
    (root / "build.json").write_text(json.dumps(info, indent=2))


def _first_last(losses: list[float]) -> str:
    return f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "n/a"
