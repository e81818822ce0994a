"""How every stage loads a model: a folder or a Hugging Face id (optionally ``@revision``), a dtype, a pad token.

Ids are resolved by ``from_pretrained`` through the standard Hugging Face cache (``HF_HUB_OFFLINE=1`` is the user's
choice; nothing here sets it). A stage resolves ``models.dtype`` once (:func:`resolve_dtype`) and hands the
``torch.dtype`` down: a name is refused below it, so ``"auto"`` never reaches ``from_pretrained`` (where it would
mean the checkpoint's own dtype). The pad-token rule, one for every stage (§5 A3): docs/gpu.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

PAD_NAMES = ("<|finetune_right_pad_id|>", "<|pad|>", "<pad>", "[PAD]", "<|padding|>", "<|endofpad|>")
RESERVED = re.compile(r"^<\|reserved_special_token_(\d+)\|>$")
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+(@[\w./-]+)?$")  # org/name or org/name@revision
ADDED_PAD = "<|pad|>"
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")


# --------------------------------------------------------------------------------------------- names and revisions
def split_revision(ref: str | Path) -> tuple[str, str | None]:
    """``"org/name@rev"`` -> ``("org/name", "rev")``; a folder (even one whose name holds ``@``) has no revision."""
    text = str(ref)
    if Path(text).exists() or "@" not in text:
        return text, None
    name, _, revision = text.rpartition("@")
    if not name or not revision:
        raise ValueError(f"model {text!r}: expected NAME or NAME@REVISION")
    return name, revision


def is_local(ref: str | Path) -> bool:
    return Path(split_revision(ref)[0]).exists()


def is_hub_id(ref: str | Path) -> bool:
    """``org/name`` or ``org/name@revision`` that is not a local path."""
    return not Path(str(ref)).exists() and bool(HUB_ID.match(str(ref))) and not str(ref).startswith(".")


def cached_commit(ref: str | Path) -> str | None:
    """The commit a Hub id (``@revision``) resolves to in the local Hugging Face cache, without any network call;
    None for a folder or an id that is not cached."""
    if is_local(ref):
        return None
    from huggingface_hub import try_to_load_from_cache

    name, revision = split_revision(ref)
    try:
        found = try_to_load_from_cache(name, "config.json", revision=revision)
    except ValueError:  # not a valid repo id
        return None
    return Path(found).parent.name if isinstance(found, str) else None


def adapter_base(adapter_dir: str | Path) -> str:
    """The base model a PEFT adapter folder names (``base_model_name_or_path``, with ``@revision`` when recorded)."""
    import json

    config_path = Path(adapter_dir) / "adapter_config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        base = config["base_model_name_or_path"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{config_path}: cannot read 'base_model_name_or_path' ({exc})") from exc
    if not base:
        raise ValueError(f"{config_path}: 'base_model_name_or_path' is empty")
    revision = config.get("revision")
    return f"{base}@{revision}" if revision and not Path(base).exists() else base


def pretrained_kwargs(ref: str | Path) -> tuple[str, dict[str, Any]]:
    """``(name_or_path, {"revision": ...})`` for ``from_pretrained``."""
    name, revision = split_revision(ref)
    return name, ({"revision": revision} if revision else {})


# --------------------------------------------------------------------------------------------- dtype and device
def default_device():
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def resolve_dtype(name: str, device=None) -> torch.dtype:
    """The torch dtype for the ``models.dtype`` name ``name`` on ``device`` (``auto``: bfloat16 on a CUDA device that
    has it, else float32); the one place a dtype name becomes a ``torch.dtype``."""
    import torch

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name == "auto":
        device = torch.device(device) if device is not None else default_device()
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    try:
        return table[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown dtype {name!r} (models.dtype); expected one of {', '.join(DTYPE_NAMES)}") from None


def weights_dtype(dtype: torch.dtype | None, device=None) -> torch.dtype:
    """``dtype`` checked to be a ``torch.dtype`` (what a stage resolved); None, from a library caller that chose
    none, is the ``auto`` rule for ``device``. A string is refused: names are resolved once, at the stage."""
    import torch

    if dtype is None:
        return resolve_dtype("auto", device)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(
            f"dtype {dtype!r}: expected a torch.dtype (a stage resolves models.dtype once with resolve_dtype)"
        )
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (the ``models.dtype`` spelling, for run records and messages)."""
    return str(dtype).removeprefix("torch.")


# --------------------------------------------------------------------------------------------- pad token
@dataclass(frozen=True)
class PadChoice:
    token: str
    token_id: int
    how: str  # "kept" | "reserved" | "unused" | "added"


def _reserved_pad(tokenizer) -> str | None:
    vocab = tokenizer.get_vocab()
    blocked = {tokenizer.eos_token_id, tokenizer.bos_token_id}
    for name in PAD_NAMES:
        if name in vocab and vocab[name] not in blocked:
            return name
    reserved = sorted((int(m.group(1)), tok) for tok in vocab if (m := RESERVED.match(tok)))
    return reserved[0][1] if reserved else None


CONVERSATIONS = (  # rendered to find the special tokens a chat template writes; some templates refuse a system turn
    [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}],
    [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}],
)


def template_token_ids(tokenizer) -> set[int]:
    """Ids of the tokens the chat template writes (turn markers, end of turn), from rendered conversations; empty
    without a template."""
    if not getattr(tokenizer, "chat_template", None):
        return set()
    ids: set[int] = set()
    for messages in CONVERSATIONS:
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - a template may raise on any turn layout it does not support
            continue
        ids |= set(tokenizer(text, add_special_tokens=False)["input_ids"])
    return ids


def _unused_special(tokenizer) -> str | None:
    """An existing special token that no text or template produces: the unknown token first, then the lowest id."""
    special = {i: t.content for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    special |= dict(zip(tokenizer.all_special_ids, tokenizer.all_special_tokens, strict=True))
    blocked = {tokenizer.eos_token_id, tokenizer.bos_token_id} | template_token_ids(tokenizer)
    free = sorted(i for i in special if i not in blocked and i < len(tokenizer))
    unk = tokenizer.unk_token_id
    if unk in free:
        return special[unk]
    return special[free[0]] if free else None


def ensure_pad_token(tokenizer) -> PadChoice:
    """Give ``tokenizer`` a pad token distinct from EOS (docs/gpu.md: the rule); left padding is set by the
    caller. ``how == "added"`` means the vocabulary grew: call :func:`match_vocabulary` on every model it feeds."""
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    if eos is None:
        raise ValueError(f"{tokenizer.name_or_path}: the tokenizer has no EOS token")
    if pad is not None and pad != eos:
        return PadChoice(tokenizer.pad_token, pad, "kept")
    for how, find in (("reserved", _reserved_pad), ("unused", _unused_special)):
        token = find(tokenizer)
        if token is not None:
            tokenizer.pad_token = token
            return PadChoice(token, tokenizer.pad_token_id, how)
    tokenizer.add_special_tokens({"pad_token": ADDED_PAD})
    return PadChoice(ADDED_PAD, tokenizer.pad_token_id, "added")


def embeddings_trained(model) -> bool:
    """Whether any parameter of ``model``'s input or output embeddings is trainable (a LoRA on them, or a copy in
    ``modules_to_save``). The ``save_embedding_layers`` of a PEFT adapter: untrained rows, including a pad row the
    policy added, are rebuilt identically when the base loads (:func:`match_vocabulary`), so saving them only adds
    the whole vocabulary matrix to every adapter."""
    layers = [model.get_input_embeddings(), model.get_output_embeddings()]
    return any(p.requires_grad for layer in layers if layer is not None for p in layer.parameters())


def match_vocabulary(model, tokenizer) -> bool:
    """Grow ``model``'s embeddings to ``len(tokenizer)`` (new rows = mean of the old rows, deterministic) and record
    the pad token in its configs; returns whether it resized."""
    import torch

    n_old = model.get_input_embeddings().weight.shape[0]
    resized = len(tokenizer) > n_old
    if resized:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        with torch.no_grad():
            for emb in {model.get_input_embeddings(), model.get_output_embeddings()} - {None}:
                emb.weight[n_old:] = emb.weight[:n_old].mean(dim=0, keepdim=True)
    model.config.pad_token_id = tokenizer.pad_token_id
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return resized


# --------------------------------------------------------------------------------------------- loading
def load_tokenizer(ref: str | Path, *, padding_side: str | None = "left"):
    """The tokenizer of a folder or Hub id, with the pad-token policy applied."""
    from transformers import AutoTokenizer

    name, kwargs = pretrained_kwargs(ref)
    tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
    ensure_pad_token(tokenizer)
    if padding_side:
        tokenizer.padding_side = padding_side
    return tokenizer


def load_causal_lm(
    ref: str | Path,
    *,
    dtype: torch.dtype | None = None,
    device=None,
    tokenizer=None,
    backbone_only: bool = False,
    place: bool = True,
):
    """A causal LM (or its backbone without the LM head, ``backbone_only``) in ``dtype`` (a ``torch.dtype``; None:
    the ``auto`` rule, see :func:`weights_dtype`) on ``device`` (default: the GPU if any); ``place=False`` leaves it
    on the CPU for a trainer that places it itself. With a ``tokenizer``, its vocabulary and pad token are matched
    (:func:`match_vocabulary`)."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM

    device = default_device() if device is None else torch.device(device)
    name, kwargs = pretrained_kwargs(ref)
    cls = AutoModel if backbone_only else AutoModelForCausalLM
    model = cls.from_pretrained(name, dtype=weights_dtype(dtype, device), **kwargs)
    if tokenizer is not None:
        match_vocabulary(model, tokenizer)
    return model.to(device) if place else model


def describe(model, tokenizer, ref: str | Path) -> dict[str, Any]:
    """What was loaded, for run records: name, revision and cached commit, dtype, parameters, pad token."""
    name, revision = split_revision(ref)
    params = list(model.parameters())
    return {
        "name": name,
        "revision": revision,
        "commit": cached_commit(ref),
        "dtype": dtype_name(params[0].dtype),
        "parameters": sum(p.numel() for p in params),
        "pad_token": tokenizer.pad_token,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "vocab_size": len(tokenizer),
    }
