"""Hostile or broken endpoints against the LLM annotator: whatever one answer does, it is that item's status.

Before: a 200 with a cut body aborted the whole run (exit 2, nothing written, the item not named, and every re-run
the same); a 40 MB answer was accepted as ok; an endpoint echoing the key got it stored; a refused connection was
reported as a timeout; a missing key for a remote endpoint became a placeholder and cost one 401 per item.
"""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from t2g_cli import app
from t2g_core.annotators import annotate
from t2g_core.annotators.llm import MissingApiKey
from t2g_core.config import AnnotateConfig
from t2g_core.demo import make_demo_feedback
from t2g_core.testing import FakeOpenAIServer

KEY = "sk-hostile-test-0123456789abcdef"


def _cfg(base_url: str, **kw) -> AnnotateConfig:
    return AnnotateConfig(
        annotator="llm", base_url=base_url, model="m", max_retries=1, timeout_s=5, concurrency=4, **kw
    )


def _run(server: FakeOpenAIServer, n: int = 8, **kw):
    return annotate(
        make_demo_feedback("summarization", n, seed=4), _cfg(server.base_url, **kw), api_key=KEY, progress=False
    ).frame


@pytest.mark.parametrize("backend", ["aiohttp", "httpx"])
def test_cut_bodies_and_hang_ups_are_item_statuses(backend):
    with FakeOpenAIServer(fault_rate=0.5, faults=("cut_body", "hang_up"), seed=1) as server:
        frame = _run(server, http_backend=backend)
    assert len(frame) == 8 and "ok" in set(frame["status"]) <= {"ok", "api_error", "timeout"}, frame[
        ["status", "error"]
    ]
    failed = frame[frame["status"] != "ok"]
    assert failed["error"].str.len().gt(0).all()


def test_an_over_long_answer_is_not_used():
    with FakeOpenAIServer(fault_rate=1.0, faults=("huge",), huge_bytes=2_000_000) as server:
        frame = _run(server, n=2, max_answer_chars=100_000)
    assert list(frame["status"]) == ["parse_error"] * 2
    assert frame["error"].str.contains("2000000 characters").all() and frame["raw"].str.len().max() <= 1000


def test_secrets_an_endpoint_echoes_are_not_stored():
    with FakeOpenAIServer(fault_rate=1.0, faults=("echo_key",)) as server:
        frame = _run(server, n=2)
    assert list(frame["status"]) == ["api_error"] * 2
    stored = " ".join(str(v) for v in frame.to_numpy().ravel())
    assert KEY not in stored and "[redacted]" in stored


@pytest.mark.parametrize("backend", ["aiohttp", "httpx"])
def test_a_refused_connection_is_reported_as_such(backend):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    frame = annotate(
        make_demo_feedback("summarization", 2, seed=4),
        _cfg(f"http://127.0.0.1:{port}/v1", http_backend=backend),
        api_key=KEY,
        progress=False,
    ).frame
    assert list(frame["status"]) == ["api_error"] * 2
    assert frame["error"].str.contains("connection failed").all(), list(frame["error"])


def test_a_remote_endpoint_without_a_key_fails_before_any_request(tmp_path, monkeypatch):
    with pytest.raises(MissingApiKey, match="no API key for https://api.example.com/v1"):
        annotate(make_demo_feedback("summarization", 2), _cfg("https://api.example.com/v1"), api_key=None)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    make_demo_feedback("summarization", 2).to_parquet("fb.parquet")
    res = CliRunner().invoke(
        app,
        [
            "annotate",
            "fb.parquet",
            "-o",
            "a.parquet",
            "--annotator",
            "llm",
            "--base-url",
            "https://api.example.com/v1",
            "-q",
        ],
    )
    assert res.exit_code == 2 and "needs an API key" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "a.parquet").exists()


@pytest.mark.slow  # waits out the client's retry of cut bodies
def test_the_command_writes_everything_then_exits_1_above_the_failure_threshold(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    make_demo_feedback("summarization", 8, seed=4).to_parquet("fb.parquet")
    with FakeOpenAIServer(fault_rate=0.5, faults=("cut_body",), seed=1) as server:
        res = CliRunner().invoke(
            app,
            [
                "annotate",
                "fb.parquet",
                "-o",
                "a.parquet",
                "--annotator",
                "llm",
                "--base-url",
                server.base_url,
                "--model",
                "m",
                "-q",
                "--set",
                "annotate.max_retries=1",  # one backoff wait per cut body, not five
            ],
        )
    import pandas as pd

    assert res.exit_code == 1 and "max_failure_rate" in res.output
    assert len(pd.read_parquet("a.parquet")) == 8
