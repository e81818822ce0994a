"""Score responses with the trained reward model: batched generation, then parse the span JSON.

Generation is batched with *left* padding (the reference padded right, so a decoder-only model continued from pads),
uses the KV cache, and is greedy by default. A generation that does not parse is returned with its status and raw
text, never raised, so the caller decides that sample's reward.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from t2g_core.config.reward_model import RewardModelConfig
from t2g_core.reward_model.grounded import GroundedSpansProcessor, TokenIndex
from t2g_core.reward_model.prompts import build_rm_prompt
from t2g_core.spans import ParsedFeedback, parse_span_json

if TYPE_CHECKING:
    import torch

ScoredResponse = ParsedFeedback  # critique, good_spans, poor_spans, status, raw (+ reasoning, error)


@dataclass(frozen=True)
class Generation:
    """Decoded continuations (special tokens removed), their lengths and whether each hit the token budget."""

    texts: list[str]
    n_new_tokens: list[int]
    hit_limit: list[bool]
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return sum(self.n_new_tokens) / self.seconds if self.seconds > 0 else float("nan")


def _base_of_adapter(adapter_dir: Path, base_model: str | None) -> str:
    if base_model:
        return base_model
    meta = adapter_dir / "rm_train.json"
    if meta.exists():
        base = json.loads(meta.read_text(encoding="utf-8")).get("base_model")
        if base and (not base.startswith("/") or Path(base).exists()):
            return base
    from t2g_core.models.loading import adapter_base

    return adapter_base(adapter_dir)


def load_reward_model(
    model_dir_or_adapter: str | Path,
    *,
    base_model: str | None = None,
    device: str | None = None,
    merge: bool = True,
    dtype: torch.dtype | None = None,
):
    """(model, tokenizer) from a LoRA adapter folder (base found in rm_train.json / adapter_config.json, or given: a
    folder or a Hub id) or a full model folder, in ``dtype`` (the resolved ``models.dtype``, a ``torch.dtype``; None:
    the ``auto`` rule), with the pad-token policy applied."""
    from t2g_core.models.loading import load_causal_lm, load_tokenizer

    path = Path(model_dir_or_adapter)
    if not path.exists():
        raise FileNotFoundError(f"reward model folder {path} does not exist")
    if (path / "adapter_config.json").exists():
        from peft import PeftModel

        base = _base_of_adapter(path, base_model)
        tokenizer = load_tokenizer(path if (path / "tokenizer_config.json").exists() else base)
        model = PeftModel.from_pretrained(
            load_causal_lm(base, dtype=dtype, device=device, tokenizer=tokenizer), str(path)
        )
        model = model.merge_and_unload() if merge else model
    else:
        tokenizer = load_tokenizer(path)
        model = load_causal_lm(path, dtype=dtype, device=device, tokenizer=tokenizer)
    return model.eval(), tokenizer


def _generation_config(model, tokenizer, cfg):
    from transformers import GenerationConfig

    sample = cfg.temperature > 0
    return GenerationConfig(
        max_new_tokens=cfg.max_new_tokens,
        do_sample=sample,
        temperature=cfg.temperature if sample else None,
        top_p=1.0 if sample else None,
        top_k=0 if sample else None,
        use_cache=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=getattr(model.config, "bos_token_id", None),
    )


def _generate_batch(
    model, tokenizer, texts: list[str], gen_cfg, grounded: tuple | None = None
) -> tuple[list[str], list[int], list[bool]]:
    """``grounded`` = (token index, the responses of these rows): quotes are constrained to them."""
    import torch
    from transformers import LogitsProcessorList

    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    processors = LogitsProcessorList()
    if grounded is not None:
        processors.append(GroundedSpansProcessor(grounded[0], grounded[1], enc["input_ids"].shape[1]))
    with torch.inference_mode():
        out = model.generate(**enc, generation_config=gen_cfg, logits_processor=processors)  # (B, T_in + T_new)
    new = out[:, enc["input_ids"].shape[1] :]  # (B, T_new)
    is_eos = new == tokenizer.eos_token_id
    has_eos = is_eos.any(dim=1)
    # tokens up to and including the first EOS; after it the batch is padded
    lengths = torch.where(
        has_eos, is_eos.int().argmax(dim=1) + 1, torch.full_like(has_eos, new.shape[1], dtype=torch.long)
    )
    decoded = [
        tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(new, lengths.tolist(), strict=True)
    ]
    return decoded, lengths.tolist(), (~has_eos).tolist()


def generate_texts(
    model, tokenizer, prompt_texts: Sequence[str], cfg, responses: Sequence[str] | None = None
) -> Generation:
    """Greedy (or low-temperature) continuations of rendered RM prompts, batched by length, in input order.

    With ``responses`` (one per prompt) and ``cfg.grounded_decoding``, every quote the model writes is a substring of
    its response (``t2g_core.reward_model.grounded``)."""
    tokenizer.padding_side = "left"
    gen_cfg = _generation_config(model, tokenizer, cfg)
    index = TokenIndex(tokenizer) if responses is not None and cfg.grounded_decoding else None
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in prompt_texts]
    order = sorted(range(len(prompt_texts)), key=lambda i: -lengths[i])  # similar lengths share a batch: less padding
    texts, n_new, hit = [""] * len(order), [0] * len(order), [False] * len(order)
    t0 = time.perf_counter()
    for b in range(0, len(order), cfg.score_batch_size):
        idx = order[b : b + cfg.score_batch_size]
        grounded = (index, [responses[i] for i in idx]) if index is not None else None
        dec, lens, lim = _generate_batch(model, tokenizer, [prompt_texts[i] for i in idx], gen_cfg, grounded)
        for j, i in enumerate(idx):
            texts[i], n_new[i], hit[i] = dec[j], lens[j], lim[j]
    return Generation(texts, n_new, hit, time.perf_counter() - t0)


def parse_generation(text: str, hit_limit: bool, max_new_tokens: int) -> ParsedFeedback:
    """Parse one generation; a failure is a status with the reason, never an exception."""
    parsed = parse_span_json(text)
    if parsed.status != "ok" and hit_limit:
        reason = f"no EOS within max_new_tokens={max_new_tokens}"
        parsed = dataclasses.replace(parsed, error=f"{reason}; {parsed.error}" if parsed.error else reason)
    return parsed


def score(
    prompts: Sequence[str], responses: Sequence[str], *, model, tokenizer, task: str, cfg
) -> list[ScoredResponse]:
    """Critique and spans for each (prompt, response), through the same prompt builder as training."""
    if len(prompts) != len(responses):
        raise ValueError(f"score: {len(prompts)} prompts but {len(responses)} responses")
    texts = [
        build_rm_prompt(tokenizer, task, p, r, cfg.max_prompt_tokens) for p, r in zip(prompts, responses, strict=True)
    ]
    gen = generate_texts(model, tokenizer, texts, cfg, responses)
    return [parse_generation(t, h, cfg.max_new_tokens) for t, h in zip(gen.texts, gen.hit_limit, strict=True)]


class RewardModelScorer:
    """The trained RM as a reward source for PPO: ``critique_batch(rows) -> list[ParsedFeedback]``."""

    def __init__(
        self,
        model_dir_or_adapter: str | Path,
        cfg=None,
        *,
        base_model: str | None = None,
        device: str | None = None,
        dtype: torch.dtype | None = None,
    ):
        self.cfg = cfg or RewardModelConfig()
        self.model, self.tokenizer = load_reward_model(
            model_dir_or_adapter, base_model=base_model, device=device, dtype=dtype
        )

    def score(self, prompts: Sequence[str], responses: Sequence[str], task: str) -> list[ScoredResponse]:
        return score(prompts, responses, model=self.model, tokenizer=self.tokenizer, task=task, cfg=self.cfg)

    def critique_batch(self, rows: Sequence[dict]) -> list[ParsedFeedback]:
        """One ParsedFeedback per row (dicts with ``task``, ``prompt``, ``response``), in row order."""
        out: list[ParsedFeedback | None] = [None] * len(rows)
        for task in dict.fromkeys(r["task"] for r in rows):
            idx = [i for i, r in enumerate(rows) if r["task"] == task]
            scored = self.score([rows[i]["prompt"] for i in idx], [rows[i]["response"] for i in idx], task)
            for i, parsed in zip(idx, scored, strict=True):
                out[i] = parsed
        return out  # type: ignore[return-value]


def load_scorer(model_dir: str | Path, cfg=None, *, device: str | None = None, dtype: torch.dtype | None = None):
    """The reward source of a trained reward-model folder, whichever kind it is (``critique_batch(rows)``); base
    weights in ``dtype`` (the resolved ``models.dtype``, a ``torch.dtype``; None: the ``auto`` rule)."""
    from t2g_core.reward_model.tagger import TaggerScorer, is_tagger

    if is_tagger(model_dir):
        return TaggerScorer(model_dir, cfg, device=device, dtype=dtype)
    return RewardModelScorer(model_dir, cfg, device=device, dtype=dtype)
