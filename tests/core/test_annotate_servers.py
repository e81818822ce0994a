"""Servers unlike OpenAI's: their own error text reaches the user, and one that queues gets clear advice.

Before: a FastAPI server's ``{"detail": ...}`` 400 became "HTTP 400: Error code: 400" (the SDK keeps only an
OpenAI-shaped message), so a server refusing ``response_format`` that way never reached the plain-JSON fallback; a
server that answers one request at a time timed out every item while its queue grew, with no hint why.
"""

from __future__ import annotations

from t2g_core.annotators import annotate
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
