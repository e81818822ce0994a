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

import math
import shutil
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig
from t2g_core.config.models import TinySize
from t2g_core.progress import Progress, as_progress


class TinySpec(StageConfig):
    """How a tiny model is built from scratch and warm-started (a named size of ``SIZES``: ``models.tiny``): the LM
    warm start on the demo corpus, then the policy's supervised steps on correct responses and, for summarization,
    on summaries with each fact wrong at ``p_halluc`` (so the policy makes errors PPO can fix)."""

    architecture: Literal["llama", "gpt2"] = "llama"
    vocab_size: int = Field(1024, ge=64)  # byte-level BPE trained on the demo corpus
    hidden_size: int = Field(128, ge=16)
    intermediate_size: int | None = Field(256, ge=16)  # Llama MLP width (None: 4 x hidden_size)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(4, ge=1)
    max_positions: int = Field(2048, ge=64)
    warm_start_steps: int = Field(300, ge=0)  # 60 x 32 never taught the reward model the JSON format; 300 x 64 does
    warm_start_lr: float = Field(2e-3, gt=0)
    warm_start_batch_size: int = Field(64, ge=1)
    warm_start_block_size: int = Field(128, ge=8)
    policy_sft_steps: int = Field(600, ge=0)
    policy_noise_steps: int = Field(60, ge=0)
    policy_noise_lr: float = Field(1e-3, gt=0)
    policy_sft_lr: float = Field(3e-3, gt=0)
    policy_sft_batch_size: int = Field(32, ge=1)
    policy_sft_examples: int = Field(4096, ge=1)  # synthetic (post, noisy summary) pairs for summarization
    policy_sft_max_tokens: int | None = Field(None, ge=8)  # the first tokens of each pair it learns (None: all)
    p_halluc: float = Field(0.35, ge=0.0, le=1.0)
    seed: int = 0
    checkpoint_every: int = Field(50, ge=1)  # a stopped build resumes from its last checkpoint (not its identity)


_MINI = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=1, num_heads=2, warm_start_steps=10)
_MINI |= dict(policy_sft_steps=20, policy_noise_steps=5, policy_sft_examples=256, policy_sft_max_tokens=512)
_SMOKE = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_heads=2, warm_start_steps=2)
_SMOKE |= dict(warm_start_batch_size=8, policy_sft_steps=2, policy_noise_steps=1, policy_sft_batch_size=8)
_SMOKE |= dict(policy_sft_examples=32)
SIZES: dict[str, TinySpec] = {"demo": TinySpec(), "mini": TinySpec(**_MINI), "smoke": TinySpec(**_SMOKE)}  # models.tiny
if tuple(SIZES) != typing.get_args(TinySize):
    raise ImportError(
        f"t2g_core.config.models.TinySize {typing.get_args(TinySize)} disagrees with SIZES {tuple(SIZES)}"
    )


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
def _model_config(cfg: TinySpec, tokenizer):
    from transformers import GPT2Config, LlamaConfig

    common = {"vocab_size": len(tokenizer), "tie_word_embeddings": True}
    common |= {f"{t}_token_id": getattr(tokenizer, f"{t}_token_id") for t in ("bos", "eos", "pad")}
    if cfg.architecture == "gpt2":
        return GPT2Config(
            n_embd=cfg.hidden_size,
            n_layer=cfg.num_layers,
            n_head=cfg.num_heads,
            n_positions=cfg.max_positions,
            **common,
        )
    return LlamaConfig(
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size or 4 * cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        rms_norm_eps=1e-5,
        **common,
    )


def build_tiny_model(out_dir: str | Path, tokenizer_dir: str | Path, cfg: TinySpec | None = None) -> Path:
    """Randomly initialise a small causal LM sized by ``cfg`` for the tokenizer in ``tokenizer_dir``.

    Saves model (safetensors), generation config and tokenizer into ``out_dir`` and returns it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    cfg = cfg or TinySpec()
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
    losses: list[float]  # every step's loss, those before a resumed checkpoint included
    seconds: float  # of this call
    resumed_step: int = 0  # the checkpoint step this call continued from (0: from the start)


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
    cfg: TinySpec | None = None,
    *,
    steps: int | None = None,
    lr: float | None = None,
    batch_size: int | None = None,
    block_size: int = 128,
    out_dir: str | Path | None = None,
    progress: Progress | bool = True,
    checkpoint_dir: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> WarmStartResult:
    """Train the model in ``model_dir`` and save it to ``out_dir`` (default: in place).

    Plain strings: language-model pretraining on packed windows. ``(prompt, response)`` pairs: supervised training with
    the loss on the response (and its ``<eot>``) only; the prompt should already be rendered with the chat template.
    AdamW with a one-cycle schedule; the caller sets torch's thread count.

    With ``checkpoint_dir``, a checkpoint is written there every ``cfg.checkpoint_every`` steps (weights, optimizer,
    schedule, the batch sampler's and torch's random state, the losses so far), and a call that finds one continues
    from it (``log`` says from which step): the result is the same as an uninterrupted run's. ``model_dir`` must then
    not be ``out_dir`` (a resumed run starts from the checkpoint, a fresh one from ``model_dir``, which must still hold
    the starting weights).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = cfg or TinySpec()
    steps = cfg.warm_start_steps if steps is None else steps
    lr = cfg.warm_start_lr if lr is None else lr
    batch_size = batch_size or cfg.warm_start_batch_size
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    is_pairs = len(texts_or_pairs) > 0 and not isinstance(texts_or_pairs[0], str)
    pair_tokens = min(cfg.max_positions, cfg.policy_sft_max_tokens or cfg.max_positions)
    batches = (
        _sft_batches(tokenizer, texts_or_pairs, pair_tokens, batch_size, gen)
        if is_pairs
        else _lm_batches(tokenizer, texts_or_pairs, min(block_size, cfg.max_positions), batch_size, gen)
    )
    desc = "policy SFT" if is_pairs else "LM warm start"
    loop = _Loop(model, gen, steps, lr, cfg.checkpoint_every, Path(checkpoint_dir) if checkpoint_dir else None)
    losses = loop.run(batches, as_progress(progress), desc=desc, log=log)
    target = Path(out_dir) if out_dir is not None else Path(model_dir)
    _save_model(model, tokenizer, target)
    return WarmStartResult(losses=losses, seconds=time.perf_counter() - t0, resumed_step=loop.resumed_step)


def _save_model(model, tokenizer, target: Path) -> None:
    """Save into a staging sibling, then move it into place: a kill leaves the old folder or the new one."""
    from t2g_core.training import publish_folder, staging_folder, writer_token

    tmp = staging_folder(target, writer_token(), create=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    publish_folder(tmp, target)


class _Loop:
    """The optimizer steps of one warm-start phase, checkpointed every ``every`` steps into ``ckpt_dir``."""

    def __init__(self, model, gen, steps: int, lr: float, every: int, ckpt_dir: Path | None):
        import torch

        self.model, self.gen, self.steps, self.every, self.ckpt_dir = model, gen, steps, every, ckpt_dir
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
        warmup = max(1, steps // 10)  # linear warm-up, then cosine decay to 10 % of lr
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt,
            lambda i: (
                (i + 1) / warmup
                if i < warmup
                else 0.1 + 0.45 * (1 + math.cos(math.pi * (i - warmup) / max(1, steps - warmup)))
            ),
        )
        self.losses: list[float] = []
        self.resumed_step = 0
        self.resumed_at: list[int] = []  # the steps earlier runs of this phase continued from

    def run(self, batches, progress: Progress, desc: str, log: Callable[[str], None] | None = None) -> list[float]:
        import torch

        if self.steps <= 0:
            return []
        self.resumed_step = start = self._restore()
        if start and log is not None:
            log(f"{desc} resumes at step {start} of {self.steps} ({self.ckpt_dir})")
        self.model.train()
        for i in range(start, self.steps):
            ids, labels, mask = next(batches)
            loss = self.model(input_ids=ids, attention_mask=mask, labels=labels).loss
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.sched.step()
            self.losses.append(float(loss.detach()))
            if self.ckpt_dir is not None and (i + 1) % self.every == 0 and i + 1 < self.steps:
                self._save(i + 1)
            progress(desc, i + 1, self.steps, {"loss": self.losses[-1]} if math.isfinite(self.losses[-1]) else None)
        self.model.eval()
        return self.losses

    def _save(self, step: int) -> None:
        import torch

        from t2g_core.training import publish_folder, save_state, staging_folder, writer_token

        final = self.ckpt_dir / f"step-{step:06d}"
        tmp = staging_folder(final, writer_token(), create=True)
        state = {
            "step": step,
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "sampler": self.gen.get_state(),  # the batch order continues where it stopped
            "rng": torch.get_rng_state(),  # dropout, where the architecture has it
            "losses": list(self.losses),
            "resumed_at": [*self.resumed_at, self.resumed_step] if self.resumed_step else list(self.resumed_at),
        }
        save_state(state, tmp / "state.pt")
        publish_folder(tmp, final)
        for old in self._checkpoints()[:-1]:
            shutil.rmtree(old, ignore_errors=True)

    def _checkpoints(self) -> list[Path]:
        if self.ckpt_dir is None or not self.ckpt_dir.is_dir():
            return []
        return sorted(p for p in self.ckpt_dir.glob("step-*[0-9]") if (p / "state.pt").is_file())

    def _restore(self) -> int:
        """Load the latest checkpoint, if any, into the model, optimizer, schedule and random states; its step. The
        file is loaded with only tensors and plain data allowed: a tampered one is refused and nothing in it runs."""
        import torch

        from t2g_core.training import load_state

        found = self._checkpoints()
        if not found:
            return 0
        state = load_state(found[-1] / "state.pt", map_location="cpu")  # tensors and plain data only
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        self.gen.set_state(state["sampler"])
        torch.set_rng_state(state["rng"])
        self.losses = list(state["losses"])
        self.resumed_at = list(state.get("resumed_at", []))
        return int(state["step"])
