"""Batched, left-padded generation for evaluation, from a model folder or a PEFT adapter folder.

A policy reference is a Hub id (``org/name[@revision]``, through the local cache), a causal-LM folder, or a PEFT
adapter folder whose ``adapter_config.json`` names its base. Prompts are rendered as PPO's rollouts see them
(``render_policy_prompt``). Each batch reseeds torch with ``seed + batch index``, so a run is reproducible for a
given batch size; sampling applies ``temperature``, ``top_k``, ``top_p`` in transformers' order, as PPO's rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t2g_core.config.evaluate import EvaluateConfig
from t2g_core.policy_prompts import render_policy_prompt

if TYPE_CHECKING:
    import torch


def generation_settings(cfg: EvaluateConfig) -> dict[str, Any]:
    """The decoding settings recorded next to every result."""
    sampled = not cfg.sampling.greedy
    settings: dict[str, Any] = {
        "decoding": "sampled" if sampled else "greedy",
        "max_new_tokens": cfg.sampling.max_new_tokens,
        "num_samples": cfg.num_samples,
        "batch_size": cfg.batch_size,
        "seed": cfg.seed,
    }
    if sampled:
        settings.update(cfg.sampling.model_dump(exclude={"max_new_tokens"}))
    return settings


def resolve_base(adapter_dir: Path) -> str:
    """The base model an adapter folder was trained on (absolute path, path relative to the adapter, or a hub id)."""
    from t2g_core.models.loading import adapter_base

    base = adapter_base(adapter_dir)
    for candidate in (Path(base), adapter_dir / base):
        if candidate.is_dir():
            return str(candidate.resolve())
    return base


def load_policy(ref: str | Path, device: str = "cpu", dtype: torch.dtype | None = None):
    """Load (model, tokenizer) from a Hub id, a model folder or an adapter folder on top of its base, in ``dtype``
    (the resolved ``models.dtype``, a ``torch.dtype``; None: the ``auto`` rule for ``device``). Model is in eval
    mode."""
    from t2g_core.models.loading import is_hub_id, load_causal_lm, load_tokenizer

    path = Path(str(ref))
    if (path / "adapter_config.json").exists():
        from peft import PeftModel

        base = resolve_base(path)
        tokenizer = load_tokenizer(path if (path / "tokenizer_config.json").exists() else base)
        model = PeftModel.from_pretrained(
            load_causal_lm(base, dtype=dtype, device=device, tokenizer=tokenizer), str(path)
        )
    elif path.is_dir() or is_hub_id(ref):
        tokenizer = load_tokenizer(ref)
        model = load_causal_lm(ref, dtype=dtype, device=device, tokenizer=tokenizer)
    else:
        raise FileNotFoundError(f"policy {ref}: no such folder")
    return model.eval(), tokenizer


def _generate_kwargs(cfg: EvaluateConfig, tokenizer) -> dict[str, Any]:
    sampling = cfg.sampling
    kwargs: dict[str, Any] = {
        "max_new_tokens": sampling.max_new_tokens,
        "do_sample": not sampling.greedy,
        "num_return_sequences": cfg.num_samples,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    if sampling.greedy:
        kwargs.update(temperature=None, top_p=None, top_k=None)
    else:  # transformers applies the temperature, then top-k, then top-p
        kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
    return kwargs


def _check_length(attention_mask, max_new_tokens: int, model, start: int) -> None:
    """A clear error instead of an indexing failure deep inside the model when a prompt does not fit."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is None:
        return
    lengths = attention_mask.sum(dim=1).tolist()  # (batch,) real prompt tokens
    for i, n in enumerate(lengths):
        if n + max_new_tokens > limit:
            raise ValueError(
                f"prompt {start + i}: {n} tokens + max_new_tokens {max_new_tokens} exceed the model's "
                f"{limit} positions; shorten the prompt or lower evaluate.sampling.max_new_tokens"
            )


def generate_with(model, tokenizer, task: str, prompts: Sequence[str], cfg: EvaluateConfig) -> list[list[str]]:
    """``cfg.num_samples`` responses per prompt from an already loaded model: shape (len(prompts), num_samples)."""
    import torch

    from t2g_core.models.loading import ensure_pad_token

    tokenizer.padding_side = "left"
    ensure_pad_token(tokenizer)
    kwargs = _generate_kwargs(cfg, tokenizer)
    device = next(model.parameters()).device
    out: list[list[str]] = []
    for b, start in enumerate(range(0, len(prompts), cfg.batch_size)):
        texts = [render_policy_prompt(tokenizer, task, p) for p in prompts[start : start + cfg.batch_size]]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        _check_length(enc["attention_mask"], cfg.sampling.max_new_tokens, model, start)
        torch.manual_seed(cfg.seed + b)
        with torch.no_grad():
            seqs = model.generate(**enc, **kwargs)  # (batch * num_samples, prompt_len + new)
        new = seqs[:, enc["input_ids"].shape[1] :]
        decoded = tokenizer.batch_decode(new, skip_special_tokens=True)
        for i in range(len(texts)):
            out.append([d.strip() for d in decoded[i * cfg.num_samples : (i + 1) * cfg.num_samples]])
    return out


def generate_samples(
    model_dir_or_adapter: str | Path,
    task: str,
    prompts: Sequence[str],
    cfg: EvaluateConfig,
    device: str = "cpu",
    dtype: torch.dtype | None = None,
) -> list[list[str]]:
    """Load a policy and return ``cfg.num_samples`` responses per prompt."""
    model, tokenizer = load_policy(model_dir_or_adapter, device, dtype)
    return generate_with(model, tokenizer, task, prompts, cfg)


def generate(
    model_dir_or_adapter: str | Path, task: str, prompts: Sequence[str], cfg: EvaluateConfig, device: str = "cpu"
) -> list[str]:
    """One response per prompt (the first sample when ``cfg.num_samples > 1``)."""
    return [samples[0] for samples in generate_samples(model_dir_or_adapter, task, prompts, cfg, device)]
