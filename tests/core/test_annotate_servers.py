"""Servers unlike OpenAI's: their own error text reaches the user, and one that queues gets clear advice.

Before: a FastAPI server's ``{"detail": ...}`` 400 became "HTTP 400: Error code: 400" (the SDK keeps only an
OpenAI-shaped message), so a server refusing ``response_format`` that way never reached the plain-JSON fallback; a
server that answers one request at a time timed out every item while its queue grew, with no hint why.
"""

from __future__ import annotations

from collections import Counter

import pytest

from t2g_core.annotators import LLMAnnotator, annotate, feedback_rows
from t2g_core.annotators.endpoint_checks import Pacing
from t2g_core.testing import FakeOpenAIServer, Reply, quoting_answer
from tests.core.test_annotate_llm import cfg_for, feedback

KEY = "sk-test-servers-0123456789"


def test_an_api_error_keeps_the_servers_own_words():
    detail = "model 'fake-model' is not loaded; start the server with --model"
    with FakeOpenAIServer(answer=lambda req: Reply(status=400, content=detail), error_style="fastapi") as server:
        frame = annotate(feedback(2), cfg_for(server, structured_output="off"), api_key=KEY, progress=False).frame
    assert list(frame["status"]) == ["api_error"] * 2
    assert frame["error"][0] == f"HTTP 400: {detail}"


def test_a_fastapi_400_refusing_response_format_reaches_the_plain_json_fallback():
    with FakeOpenAIServer(json_schema=False, error_style="fastapi") as server:
        run = annotate(feedback(3), cfg_for(server, concurrency=1), api_key=KEY, progress=False)
    assert set(run.frame["status"]) == {"ok"} and run.stats["structured_output"] is False
    assert "response_format" in server.requests[0] and "response_format" not in server.requests[-1]


def test_a_validation_422_naming_response_format_reaches_the_fallback_too():
    """FastAPI's own validation error (a model with extra fields forbidden) is a 422 with a list of details."""
    rejected = {"detail": [{"loc": ["body", "response_format"], "msg": "Extra inputs are not permitted"}]}

    def answer(request: dict) -> str | Reply:
        return Reply(status=422, body=rejected) if "response_format" in request else quoting_answer(request)

    with FakeOpenAIServer(answer=answer) as server:
        run = annotate(feedback(2), cfg_for(server, concurrency=1), api_key=KEY, progress=False)
    assert set(run.frame["status"]) == {"ok"} and run.stats["structured_output"] is False
    with FakeOpenAIServer(answer=answer) as server:  # asked for json_schema only: the error says what was refused
        strict = annotate(feedback(1), cfg_for(server, structured_output="json_schema"), api_key=KEY, progress=False)
    assert strict.frame["error"][0] == "HTTP 422: body.response_format: Extra inputs are not permitted"


def test_a_server_that_answers_one_request_at_a_time(tmp_path):
    """With more requests in flight than the server runs, the queue outlasts the timeout: items time out, the
    abandoned requests are still worked through, and the error says what to change. The documented settings
    (concurrency = the requests the server runs at once, a timeout above one answer's time) annotate every item."""
    df = feedback(6)
    with FakeOpenAIServer(latency_s=0.3, serial=True) as server:
        crowded = cfg_for(server, concurrency=6, timeout_s=0.7, max_retries=0)
        frame = annotate(df, crowded, api_key=KEY, cache_dir=tmp_path / "c", progress=False).frame
        statuses = list(frame["status"])
        assert statuses.count("timeout") >= 3, statuses
        timed_out = frame["error"][statuses.index("timeout")]
        assert "answers one request at a time" in timed_out and "lower annotate.concurrency" in timed_out
        served = server.n_requests
        calm = cfg_for(server, concurrency=1, timeout_s=3.0, max_retries=1)
        again = annotate(df, calm, api_key=KEY, cache_dir=tmp_path / "c", progress=False).frame
    assert server.answered_after_gone >= 1  # the server kept working on requests nobody waited for
    assert set(again["status"]) == {"ok"} and server.n_requests == served + statuses.count("timeout")


def test_a_server_that_queues_is_recognised_and_the_requests_in_flight_lowered():
    """With eight requests in flight and 0.2 s answers, a one-at-a-time server makes the eighth wait 1.6 s, past the
    1 s timeout, and every retry joins the back of the queue: without the check, 3 of 16 items still time out after 3
    retries. The first three latencies (about 0.2, 0.4, 0.6 s) give the server away; one request at a time, every item
    is answered (the three requests abandoned before the limit fell keep the server busy for a while: 3 retries, not 2,
    so a loaded machine does not run them out, as it once did in `make test-quick`)."""
    lines: list[str] = []
    with FakeOpenAIServer(latency_s=0.2, serial=True) as server:
        cfg = cfg_for(server, concurrency=8, timeout_s=1.0, max_retries=3)
        run = annotate(feedback(16), cfg, api_key=KEY, progress=False, log=lines.append)
    assert set(run.frame["status"]) == {"ok"}, (Counter(run.frame["status"]), lines)
    assert len(lines) == 1 and "answers one request at a time" in lines[0] and "lowered to 1" in lines[0]
    assert run.stats["notes"] == lines


def test_a_server_that_runs_requests_side_by_side_keeps_its_concurrency():
    lines: list[str] = []
    with FakeOpenAIServer(latency_s=0.3) as server:
        annotator = LLMAnnotator(cfg_for(server, concurrency=4, timeout_s=0.5), api_key=KEY, log=lines.append)
        rows = annotator.annotate(feedback_rows(feedback(8)), progress=False)
    assert {r["status"] for r in rows} == {"ok"} and annotator.pacing.limit == 4 and not lines


@pytest.mark.parametrize(
    ("latencies", "limit", "timeout_s", "lowered"),
    [
        ((1.0, 2.0, 3.1), 8, 10.0, True),  # queued: about t, 2t, 3t, and 8 in flight would wait 8 s of 10
        ((1.5, 2.5, 3.5), 8, 10.0, True),  # the same, with half a second of client overhead on each
        ((1.0, 1.1, 1.2), 8, 10.0, False),  # side by side
        ((1.0, 1.1, 3.0), 8, 10.0, False),  # irregular: two together, then a late one
        ((1.0, 2.0, 3.0), 8, 20.0, False),  # queued, but the queue is short beside the timeout
        ((1.0, 2.0, 3.0), 2, 1.0, False),  # two in flight: nothing to lower
    ],
)
def test_pacing_reads_a_queue_from_the_first_three_latencies(latencies, limit, timeout_s, lowered):
    pacing = Pacing(limit, timeout_s)
    lines = [pacing.observe(t, now=100.0 + t) for t in (*latencies, 9.0)]  # all sent together, at 100 s
    assert (pacing.limit == 1) is lowered and (lines[2] is not None) is lowered
    assert lines[:2] == [None, None] and lines[3] is None  # decided once, on the third answer


def test_pacing_counts_only_the_requests_sent_before_the_first_answer():
    """A request sent after the first answer came may find the queue shorter (here: answered in 1 s)."""
    pacing = Pacing(8, 10.0)
    assert pacing.observe(1.0, now=101.0) is None and pacing.observe(1.0, now=102.5) is None  # sent at 101.5
    assert pacing.observe(2.0, now=102.0) is None and not pacing.decided
    assert pacing.observe(3.0, now=103.0) is not None and pacing.limit == 1
