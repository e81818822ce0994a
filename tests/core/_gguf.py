"""Write a tiny GGUF file from a Hugging Face Llama folder with the ``gguf`` package, as llama.cpp's converter does
(tensor names from gguf's name map, q/k rows permuted for its rotary layout, a byte-level BPE tokenizer as token list,
token types and merges), so the import can be tested without a real model file."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

CONTROL, NORMAL = 3, 1  # gguf token types


def _permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order (its rotary embedding pairs neighbouring rows; HF pairs the two halves)."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _add_tokenizer(writer, folder: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    tokens = tok.convert_ids_to_tokens(list(range(len(tok))))
    special = set(tok.all_special_ids)
    merges = json.loads((folder / "tokenizer.json").read_text())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([CONTROL if i in special else NORMAL for i in range(len(tokens))])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(tok.bos_token_id)
    writer.add_eos_token_id(tok.eos_token_id)
    if tok.pad_token_id is not None:
        writer.add_pad_token_id(tok.pad_token_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(tok.chat_template)


def write_tiny_gguf(
    folder: str | Path,
    path: str | Path,
    *,
    quant: str = "Q8_0",
    arch: str = "llama",
    rename: dict[str, str | None] | None = None,
    fields: dict[str, object] | None = None,
) -> Path:
    """``folder`` (a Llama checkpoint) as a GGUF file at ``path``: matrices in ``quant`` (``F32``, ``F16``, ``Q8_0``;
    any other type name is written as zero bytes of that type, for an unsupported-type file), norms in F32.
    ``arch`` is the architecture the file claims. A hostile file: ``rename`` gives tensors other GGUF names (None
    leaves one out); ``fields`` sets header fields over the true ones (``{"llama.block_count": 10**6}``: sizes the
    file does not hold; a value of the wrong type: a malformed header)."""
    import gguf
    import torch
    from transformers import AutoConfig

    folder, path = Path(folder), Path(path)
    cfg = AutoConfig.from_pretrained(folder)
    from safetensors.torch import load_file

    state = load_file(folder / "model.safetensors")
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name("tiny")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    _add_tokenizer(writer, folder)
    for key, value in (fields or {}).items():
        writer.add_key_value(key, value, _value_type(value), sub_type=gguf.GGUFValueType.INT32)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    qtype = gguf.GGMLQuantizationType[quant]
    for hf_name, tensor in state.items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        base, suffix = hf_name.rsplit(".", 1)
        data = tensor.to(torch.float32).numpy()
        if ".q_proj." in hf_name:
            data = _permute(data, cfg.num_attention_heads)
        elif ".k_proj." in hf_name:
            data = _permute(data, cfg.num_key_value_heads)
        name = (rename or {}).get(f"{names.get_name(base)}.{suffix}", f"{names.get_name(base)}.{suffix}")
        if name is None:
            continue
        if data.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, data)
        elif qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, data.astype(np.float16))
        elif qtype == gguf.GGMLQuantizationType.Q8_0:
            writer.add_tensor(name, gguf.quantize(data, qtype), raw_dtype=qtype)
        else:
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            raw = np.zeros((data.shape[0], data.shape[1] // block * size), dtype=np.uint8)
            writer.add_tensor(name, raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _value_type(value: object):
    from gguf import GGUFValueType

    if isinstance(value, int):
        return GGUFValueType.UINT32 if 0 <= value < 2**32 else GGUFValueType.INT64
    return {str: GGUFValueType.STRING, float: GGUFValueType.FLOAT32, list: GGUFValueType.ARRAY}[type(value)]


def wheel_with(path: Path, files: dict[str, bytes]) -> Path:
    """A minimal valid wheel holding ``files`` (pip checks the .dist-info)."""
    name, version = path.name.split("-")[:2]
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return path
