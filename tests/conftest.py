"""Test-wide settings (offline, no telemetry, small thread counts), the rules of the quick tier, shared fixtures."""

from __future__ import annotations

import os

for key, value in {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # MLflow 3's server starts a GenAI job runner (eight huey consumer processes, each importing mlflow) unless told
    # not to; nothing here runs MLflow jobs, and it was more than half the CPU of an e2e test's server start-up
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}.items():
    os.environ.setdefault(key, value)

# Under pytest-xdist (`make test`) each worker gets its share of the cores: torch and BLAS would otherwise start one
# thread per core in every worker and fight over them. Set before any test module imports torch.
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cores // workers)))


import pytest  # noqa: E402

# --------------------------------------------------------------------------------------------- the quick tier
# `make test-quick` runs `-m "not slow and not e2e"`. A test that starts a server or a browser is slow by what it does,
# whatever the clock says on a given machine: using one of these fixtures without the marker fails the test.
SERVING_FIXTURES = {
    "prefect_harness": "the Prefect test harness (an API server)",
    "servers": "real prefect and mlflow servers",
    "page": "a headless Chromium",
}
# An unmarked test slower than this is listed (not failed: a loaded machine stretches every test) at the end of the run.
QUICK_TEST_LIMIT_S = 10.0
_over_limit: list[tuple[float, str]] = []


def _tiered(item_or_report) -> bool:
    keywords = item_or_report.keywords
    return "slow" in keywords or "e2e" in keywords


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture starts: a test that uses a serving fixture is marked slow or e2e, or it fails."""
    serving = [f"{name} ({what})" for name, what in SERVING_FIXTURES.items() if name in item.fixturenames]
    if serving and not _tiered(item):
        pytest.fail(f"mark this test slow (or e2e): it uses {', '.join(serving)}", pytrace=False)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # xdist hands tests out in collection order (every worker collects the same order): the long ones first, so
        # the many short ones fill the gaps at the end instead of one long test running alone on one worker.
        items.sort(key=lambda item: not _tiered(item))
        if config.getvalue("loadgroup"):
            _name_the_xdist_groups(items)


def _name_the_xdist_groups(items) -> None:
    """``--dist loadgroup`` sends the tests whose node id ends in ``@group`` to one worker. pytest-xdist 3.8 appends
    it by assigning ``item._nodeid``, which pytest 9 no longer reads (the id is ``item._id``): every group was
    silently spread over the workers. Append it where pytest reads it, unless xdist already did."""
    from _pytest.nodeid import NodeId

    for item in items:
        groups = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        if groups and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > QUICK_TEST_LIMIT_S and not _tiered(report):
        _over_limit.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter):
    if _over_limit:
        terminalreporter.section(f"unmarked tests over {QUICK_TEST_LIMIT_S:g} s: make them faster or mark them slow")
        for duration, nodeid in sorted(_over_limit, reverse=True):
            terminalreporter.write_line(f"{duration:6.1f} s  {nodeid}")


# --------------------------------------------------------------------------------------------- shared fixtures
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

    from t2g_core.models.tiny import TinySpec, build_tiny_model, train_tokenizer

    try:
        from t2g_core.demo import demo_corpus, make_demo_feedback

        corpus = _FIXTURE_CORPUS + demo_corpus(make_demo_feedback("summarization", 32, seed=0))
    except ImportError:  # demo data not importable: the fixed corpus is enough for a working tokenizer
        corpus = _FIXTURE_CORPUS * 20
    root = tmp_path_factory.mktemp("tiny_model")
    train_tokenizer(corpus, 512, root / "tokenizer")
    cfg = TinySpec(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2, seed=0)
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


@pytest.fixture
def live_ranks():
    """The rank processes of a workspace's gangs still alive (their command line names its gang folder)."""
    from pathlib import Path

    import psutil

    def find(workspace) -> list:
        folder = str(Path(workspace.root) / "gang")
        return [
            p
            for p in psutil.process_iter(["cmdline"])
            if "gang-rank" in (c := " ".join(p.info["cmdline"] or [])) and folder in c
        ]

    return find


@pytest.fixture
def kill_rank_one(live_ranks):
    """Runs ``train()`` (a gang's stage) in a thread, SIGKILLs rank 1 once ``ready()`` (a checkpoint is written), and
    checks that the stage failed naming that rank and that no rank or launcher of the workspace is left."""
    import signal
    import threading
    import time

    from t2g_core.gang import GangFailed

    def kill(workspace, train, ready) -> None:
        outcome: dict = {}

        def first_run():
            try:
                outcome["ref"] = train()
            except Exception as exc:  # noqa: BLE001 - the test reads it
                outcome["error"] = exc

        thread = threading.Thread(target=first_run)
        thread.start()
        deadline = time.monotonic() + 180
        while not ready():
            assert time.monotonic() < deadline and thread.is_alive(), outcome
            time.sleep(0.1)
        rank1 = next(p for p in live_ranks(workspace) if p.environ().get("RANK") == "1")
        rank1.send_signal(signal.SIGKILL)
        thread.join(120)
        assert isinstance(outcome.get("error"), GangFailed), outcome
        assert "rank 1 of the 2-process gang was killed by SIGKILL" in str(outcome["error"])
        assert not live_ranks(workspace)  # the other rank and the launcher are gone too

    return kill


@pytest.fixture(scope="session")
def llama3_style_dir(tmp_path_factory):
    """A tiny Llama checkpoint whose tokenizer is shaped like Llama 3's: no pad token, EOS (end of turn) != BOS, and a
    few unused ``<|reserved_special_token_i|>`` tokens; built by the project's tiny-model factory."""
    import torch

    from t2g_core.demo import demo_corpus, make_demo_feedback
    from t2g_core.models.tiny import TinySpec, build_tiny_model, train_tokenizer

    root = tmp_path_factory.mktemp("llama3_style")
    corpus = _FIXTURE_CORPUS + demo_corpus(make_demo_feedback("summarization", 32, seed=0))
    train_tokenizer(corpus, 512, root / "tokenizer", pad=False, reserved=4)
    cfg = TinySpec(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, seed=0)
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

    from t2g_core.demo import demo_corpus, make_demo_feedback
    from t2g_core.models.tiny import TinySpec, build_tiny_model, train_tokenizer

    corpus = _FIXTURE_CORPUS + demo_corpus(make_demo_feedback("summarization", 32, seed=0))
    train_tokenizer(corpus, 512, root / "tokenizer", pad=False)
    tok = AutoTokenizer.from_pretrained(root / "tokenizer")
    if unused_special:
        tok.add_special_tokens({"unk_token": unused_special})
    tok.pad_token = tok.eos_token
    tok.save_pretrained(root / "tokenizer")
    cfg = TinySpec(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, seed=0)
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
