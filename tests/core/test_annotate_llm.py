"""LLM annotator against a real local HTTP server (t2g_core.testing) through the real openai client."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from t2g_core.annotators import annotate
from t2g_core.annotators.cache import DB_NAME, AnswerCache
from t2g_core.annotators.prompts import render_messages
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.schemas import ANNOTATIONS, STATUSES, validate_frame
from t2g_core.testing import FakeOpenAIServer, Reply, quoting_answer

KEY = "sk-test-DO-NOT-LEAK-123"


def feedback(n: int, task: str = "summarization", critique: str | None = None) -> pd.DataFrame:
    rows = [
        {
            "id": f"it-{i:03d}",
            "task": task,
            "prompt": f"Post number {i}: Ana moved to Lisbon with {i} cats.",
            "response": f"Ana moved to Lisbon with {i} cats and a dog named Rex {i}.",
            "critique": critique,
            "reference": None,
            "tests": None,
            "entry_point": None,
            "meta": None,
        }
        for i in range(n)
    ]
    return pd.DataFrame(rows)


def cfg_for(server: FakeOpenAIServer, **kw) -> AnnotateConfig:
    base = dict(
        annotator="llm", base_url=server.base_url, model="fake-model", concurrency=8, timeout_s=2.0, max_retries=2
    )
    return AnnotateConfig(**{**base, **kw})


def _user_text(request: dict) -> str:
    return request["messages"][-1]["content"]


def test_scripted_answers_become_rows_and_the_key_is_only_sent(tmp_path):
    df = feedback(5)
    with FakeOpenAIServer() as server:
        run = annotate(df, cfg_for(server), api_key=KEY, cache_dir=tmp_path / "cache", progress=False)
    frame = validate_frame(run.frame, ANNOTATIONS, "test")
    assert list(frame["id"]) == list(df["id"])
    assert set(frame["status"]) == {"ok"}
    for row, resp in zip(frame.to_dict(orient="records"), df["response"], strict=True):
        assert row["good_spans"] == [" ".join(resp.split()[:3])]
        assert row["poor_spans"] and row["poor_spans"][0] in resp
        assert (
            row["reasoning"].startswith("Step 1") and row["prompt_tokens"] > 0 and row["annotator"] == "llm:fake-model"
        )
    assert server.auth_headers == [f"Bearer {KEY}"] * 5
    assert all(r["response_format"]["type"] == "json_schema" for r in server.requests)
    assert run.stats["structured_output"] is True and run.stats["requests"] == 5
    with AnswerCache(tmp_path / "cache") as cache:
        assert len(cache) == 5
    assert gc.get_freeze_count() == 0  # the collector is frozen only while requests are in flight
    stored = frame.to_json().encode() + b"".join(p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert KEY.encode() not in stored


def test_prompt_asks_for_reasoning_and_exact_quotes_and_grounding_uses_the_human_critique():
    row = feedback(1, critique="The dog's name is wrong.").to_dict(orient="records")[0]
    user = render_messages(row, "critique", "v1")[1]["content"]
    assert "step by step" in user and "character for character" in user and row["response"] in user
    grounded = render_messages(row, "grounding", "v1")[1]["content"]
    assert "The dog's name is wrong." in grounded
    with pytest.raises(ValueError, match="it-000.*human critique"):
        render_messages(dict(row, critique=None), "grounding", "v1")
    with pytest.raises(FileNotFoundError, match="summarization.v9.txt"):
        render_messages(row, "critique", "v9")


def test_endpoint_without_json_schema_falls_back_to_tolerant_parsing(tmp_path):
    fenced = "Let me think.\n```json\n{'critique': 'ok', 'good_spans': ['Ana moved'], 'poor_spans': [],}\n```"
    with FakeOpenAIServer(answer=lambda req: fenced, json_schema=False) as server:
        run = annotate(feedback(3), cfg_for(server, concurrency=1), cache_dir=tmp_path, progress=False)
    assert set(run.frame["status"]) == {"ok"} and run.stats["structured_output"] is False
    assert run.frame["good_spans"].tolist() == [["Ana moved"]] * 3
    assert "response_format" not in server.requests[-1]


def test_429_retry_after_is_honoured(tmp_path):
    seen: Counter[str] = Counter()

    def answer(req):
        seen[_user_text(req)] += 1
        if seen[_user_text(req)] == 1:
            return Reply(status=429, content="slow down", headers={"Retry-After": "0.4"})
        return quoting_answer(req)

    with FakeOpenAIServer(answer=answer) as server:
        start = time.perf_counter()
        run = annotate(feedback(4), cfg_for(server), cache_dir=tmp_path, progress=False)
        elapsed = time.perf_counter() - start
    assert set(run.frame["status"]) == {"ok"}
    assert server.n_requests == 8
    assert elapsed >= 0.4  # the client waited the server's Retry-After (its own backoff would start at ~0.4-0.5 s too,
    assert elapsed < 3.0  # so also check it did not wait for anything much longer)


@pytest.mark.parametrize(
    ("fault", "status", "error"),
    [
        ("rate_limit", "api_error", "HTTP 429"),
        ("server_error", "api_error", "HTTP 500"),
        ("slow", "timeout", "no answer within"),
        ("malformed", "parse_error", "no JSON object"),
        ("truncated", "parse_error", "truncated"),
        ("refusal", "refused", "refused"),
        ("bad_body", "api_error", "malformed completion"),
    ],
)
def test_each_fault_ends_in_its_status(tmp_path, fault, status, error):
    with FakeOpenAIServer(fault_rate=1.0, faults=(fault,), slow_s=1.0) as server:
        timeout = 0.3 if fault == "slow" else 5.0  # generous unless the timeout is what is tested (shared, loaded CI)
        run = annotate(
            feedback(2), cfg_for(server, max_retries=1, timeout_s=timeout), cache_dir=tmp_path, progress=False
        )
    assert run.frame["status"].tolist() == [status, status]
    assert all(error in e for e in run.frame["error"])
    if fault in ("rate_limit", "server_error", "slow"):
        assert server.n_requests == 4  # one retry each, by the client's own retry machinery


@pytest.mark.parametrize("backend", ["aiohttp", "httpx"])
def test_twenty_percent_faults_lose_no_item_and_a_rerun_asks_only_for_the_unanswered(tmp_path, backend):
    df = feedback(60)
    with FakeOpenAIServer(fault_rate=0.2, slow_s=1.0, seed=3, latency_s=0.01) as server:
        cfg = cfg_for(server, timeout_s=0.4, max_retries=1, concurrency=16, http_backend=backend)
        first = annotate(df, cfg, cache_dir=tmp_path, progress=False).frame
        assert sorted(first["id"]) == sorted(df["id"]) and first["status"].isin(STATUSES).all()
        assert (first["status"] != "ok").sum() >= 3, Counter(first["status"])  # faults really happened
        assert server.outcomes["ok"] < server.n_requests
        unanswered = set(first.loc[first["status"].isin(["api_error", "timeout"]), "id"])
        server.fault_rate, before = 0.0, server.n_requests
        second = annotate(
            df,
            cfg_for(server, timeout_s=10.0, max_retries=1, concurrency=16, http_backend=backend),
            cache_dir=tmp_path,
            progress=False,
        )
        asked = [_user_text(r) for r in server.requests[before:]]
    assert second.stats["requests"] == len(unanswered) == len(asked)
    assert all(any(df.set_index("id").loc[i, "response"] in text for text in asked) for i in unanswered)
    answered = first[~first["id"].isin(unanswered)].set_index("id")
    again = second.frame.set_index("id").loc[answered.index]
    assert again["status"].tolist() == answered["status"].tolist()  # cached answers, same outcome, no request


def test_only_failed_redoes_failed_items_without_the_cache(tmp_path):
    df = feedback(12)
    with FakeOpenAIServer(fault_rate=0.5, faults=("malformed",), seed=1) as server:
        first = annotate(df, cfg_for(server), cache_dir=tmp_path, progress=False).frame
        failed = set(first.loc[first["status"] != "ok", "id"])
        assert 0 < len(failed) < 12
        server.fault_rate, before = 0.0, server.n_requests
        run = annotate(df, cfg_for(server, only_failed=True), cache_dir=tmp_path, progress=False, previous=first)
    assert server.n_requests - before == len(failed) and run.stats["kept_from_previous"] == 12 - len(failed)
    assert set(run.frame["status"]) == {"ok"}
    no_previous = AnnotateConfig(annotator="llm", base_url="http://127.0.0.1:9/v1", only_failed=True)
    with pytest.raises(ValueError, match="previous"):
        annotate(df, no_previous, cache_dir=tmp_path, progress=False)


KILLED_RUN = """
import sys, pandas as pd
from t2g_core.annotators import annotate
from t2g_core.config.annotate import AnnotateConfig
df = pd.read_parquet(sys.argv[1])
cfg = AnnotateConfig(annotator="llm", base_url=sys.argv[2], model="fake-model", concurrency=2)
annotate(df, cfg, cache_dir=sys.argv[3], progress=False)
"""


def _stored(cache: Path) -> int:
    if not (cache / DB_NAME).exists():
        return 0
    with AnswerCache(cache) as store:
        return len(store)


@pytest.mark.slow  # a fresh interpreter importing pandas + openai: ~5 s on the shared 2 cores
def test_a_killed_run_keeps_every_completed_answer(tmp_path):
    df = feedback(40)
    df.to_parquet(tmp_path / "fb.parquet")
    cache = tmp_path / "cache"
    with FakeOpenAIServer(latency_s=0.15) as server:
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_RUN, str(tmp_path / "fb.parquet"), server.base_url, str(cache)]
        )
        try:
            deadline = time.monotonic() + 60
            while _stored(cache) < 6 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
        finally:
            proc.kill()
            proc.wait()
        answered = _stored(cache)
        assert 6 <= answered < 40
        with AnswerCache(cache) as store:  # every stored answer is complete
            assert all(json.loads(text)["content"] for (text,) in store._db.execute("SELECT answer FROM answers"))
        before = server.n_requests
        run = annotate(df, cfg_for(server, concurrency=8), cache_dir=cache, progress=False)
    assert run.stats["cache_hits"] == answered and server.n_requests - before == 40 - answered
    assert set(run.frame["status"]) == {"ok"}


def test_inside_a_running_event_loop(tmp_path):
    import asyncio

    async def main():
        with FakeOpenAIServer() as server:
            return annotate(feedback(2), cfg_for(server), cache_dir=tmp_path, progress=False).frame

    assert asyncio.run(main())["status"].tolist() == ["ok", "ok"]


def test_cost_accounting(tmp_path):
    with FakeOpenAIServer() as server:
        run = annotate(
            feedback(3),
            cfg_for(server, price_per_1k=(2.0, 10.0)),
            cache_dir=tmp_path,
            progress=False,
        )
    f = run.frame
    expected = f["prompt_tokens"].sum() / 1000 * 2.0 + f["completion_tokens"].sum() / 1000 * 10.0
    assert expected > 0
    assert run.stats["cost"] == pytest.approx(expected) and run.stats["cost_this_run"] == pytest.approx(expected)


def test_a_slow_parse_holds_up_no_other_request(monkeypatch):
    """Answers are parsed beside the event loop: while the first answer's parse is stuck, the other requests are
    still sent, answered and parsed (on the loop, the stuck parse would stop them all; its wait would time out)."""
    import threading

    from t2g_core.annotators import llm

    n, parsed, done, stuck = 6, [], threading.Event(), []
    real = llm.parse_span_json

    def parse(text):
        parsed.append(text)
        if len(parsed) == 1:
            stuck.append(not done.wait(timeout=60))  # a guard only: it returns at once when the others get through
        elif len(parsed) == n:
            done.set()
        return real(text)

    monkeypatch.setattr(llm, "parse_span_json", parse)
    with FakeOpenAIServer() as server:
        frame = annotate(feedback(n), cfg_for(server, concurrency=n, timeout_s=120), progress=False).frame
    assert stuck == [False] and len(parsed) == n and set(frame["status"]) == {"ok"}
