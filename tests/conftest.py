"""Test-wide settings: offline, no telemetry, deterministic small thread counts."""

from __future__ import annotations

import os

for key, value in {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(key, value)


# --------------------------------------------------------------------------------------------- shared fixtures
import pytest  # noqa: E402

_FIXTURE_CORPUS = [
    "I am Cai. I live in Quito. I have 3 pets. All of them are dogs. Their fur is gray. I work as a coach.",
    "This is Cai, who lives in Quito with 3 gray dogs, works as a coach, rests on Sunday and loves beans.",
    "The summary says Paris but the post says Quito. The summary omits the food.",
    '{"critique": "The summary says Paris but the post says Quito.", "good_spans": ["Cai"], "poor_spans": ["Paris"]}',
    "def add(a, b):\n    return a + b\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n",
    "Question: What is the capital of France? Answer: Paris.",
]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama with a byte-level BPE tokenizer and chat template (pad != eos = end of turn), built in
    seconds.

    Load it like any model: ``AutoTokenizer.from_pretrained(tiny_model_dir)``,
    ``AutoModelForCausalLM.from_pretrained(...)``.
    """
    import torch

    from t2g_core.config.models import TinyModelConfig
    from t2g_core.models.tiny import build_tiny_model, train_tokenizer

    try:
        from t2g_core.demo import demo_corpus, make_demo_feedback

        corpus = _FIXTURE_CORPUS + demo_corpus(make_demo_feedback("summarization", 32, seed=0))
    except ImportError:  # demo data not importable: the fixed corpus is enough for a working tokenizer
        corpus = _FIXTURE_CORPUS * 20
    root = tmp_path_factory.mktemp("tiny_model")
    train_tokenizer(corpus, 512, root / "tokenizer")
    cfg = TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2, seed=0)
    with torch.random.fork_rng():
        build_tiny_model(root / "model", root / "tokenizer", cfg)
    return root / "model"


@pytest.fixture(autouse=True)
def _no_leaked_tracking_uri():
    """A test that points MLflow at its own store or server must not leave $MLFLOW_TRACKING_URI behind for the next."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


LLAMA3_STYLE_REPO = "org/name"


@pytest.fixture(scope="session")
def llama3_style_dir(tmp_path_factory):
    """A tiny Llama checkpoint whose tokenizer is shaped like Llama 3's: no pad token, EOS (end of turn) != BOS, and a
    few unused ``<|reserved_special_token_i|>`` tokens; built by the project's tiny-model factory."""
    import torch

    from t2g_core.config.models import TinyModelConfig
    from t2g_core.demo import demo_corpus, make_demo_feedback
    from t2g_core.models.tiny import build_tiny_model, train_tokenizer

    root = tmp_path_factory.mktemp("llama3_style")
    corpus = _FIXTURE_CORPUS + demo_corpus(make_demo_feedback("summarization", 32, seed=0))
    train_tokenizer(corpus, 512, root / "tokenizer", pad=False, reserved=4)
    cfg = TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, seed=0)
    with torch.random.fork_rng():
        build_tiny_model(root / "model", root / "tokenizer", cfg)
    return root / "model"


def put_in_hf_cache(folder, repo_id: str, hf_home, commit: str = "0123456789abcdef0123456789abcdef01234567") -> str:
    """Lay ``folder`` out as the Hugging Face cache does for a downloaded model, so ``from_pretrained(repo_id)``
    loads it with ``HF_HUB_OFFLINE=1``: ``$HF_HOME/hub/models--ORG--NAME/snapshots/<commit>/`` and ``refs/main``."""
    import shutil
    from pathlib import Path

    repo = Path(hf_home) / "hub" / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return commit


@pytest.fixture
def hf_home(tmp_path, monkeypatch, llama3_style_dir):
    """A Hugging Face home in a temporary folder (never the real cache) holding ``org/name``; this process and its
    children resolve Hub ids through it, offline."""
    import huggingface_hub.constants as hub

    home = tmp_path / "hf-home"
    put_in_hf_cache(llama3_style_dir, LLAMA3_STYLE_REPO, home)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "HF_HOME", str(home))
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    return home


def _pad_is_eos_model(root, unused_special: str | None):
    """A tiny Llama from the project's factory whose tokenizer pads with its EOS (SmolLM2's layout), with or without
    one unused special token (``unused_special``, added as the unknown token)."""
    import torch
    from transformers import AutoTokenizer

    from t2g_core.config.models import TinyModelConfig
    from t2g_core.demo import demo_corpus, make_demo_feedback
    from t2g_core.models.tiny import build_tiny_model, train_tokenizer

    corpus = _FIXTURE_CORPUS + demo_corpus(make_demo_feedback("summarization", 32, seed=0))
    train_tokenizer(corpus, 512, root / "tokenizer", pad=False)
    tok = AutoTokenizer.from_pretrained(root / "tokenizer")
    if unused_special:
        tok.add_special_tokens({"unk_token": unused_special})
    tok.pad_token = tok.eos_token
    tok.save_pretrained(root / "tokenizer")
    cfg = TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, seed=0)
    with torch.random.fork_rng():
        build_tiny_model(root / "model", root / "tokenizer", cfg)
    return root / "model"


@pytest.fixture(scope="session")
def smollm2_style_dir(tmp_path_factory):
    """pad = EOS (end of turn) and an unused ``<|endoftext|>`` special token, as SmolLM2-Instruct ships."""
    return _pad_is_eos_model(tmp_path_factory.mktemp("smollm2_style"), "<|endoftext|>")


@pytest.fixture(scope="session")
def pad_is_eos_dir(tmp_path_factory):
    """pad = EOS and no special token left to pad with: the pad-token policy has to add one."""
    return _pad_is_eos_model(tmp_path_factory.mktemp("pad_is_eos"), None)
