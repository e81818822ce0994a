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
