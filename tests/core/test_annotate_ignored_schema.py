"""A server that accepts ``response_format`` and ignores it (``transformers serve``: prose with HTTP 200).

Before: the run recorded ``structured_output: true`` and every item became a parse_error, with no word that the
schema was ignored. Now the annotator notices from the answers, says so in one line, records it, asks for JSON in
the prompt and re-asks the items that got prose; the cache ends up holding the JSON answers, never the prose.
"""

from __future__ import annotations

import pytest

from t2g_core.annotators import annotate
from t2g_core.annotators.cache import AnswerCache
from t2g_core.annotators.endpoint_checks import JSON_INSTRUCTION, SchemaCheck, opens_json, with_json_instruction
from t2g_core.testing import PROSE, FakeOpenAIServer, Reply, quoting_answer
from tests.core.test_annotate_llm import cfg_for, feedback

KEY = "sk-test-ignored-schema-0123"
LINE = "the endpoint ignored response_format: {n} of {m} answers were not JSON; asking for JSON in the prompt instead"


def _prompted(request: dict) -> bool:
    return JSON_INSTRUCTION in request["messages"][-1]["content"]


def test_an_ignored_schema_is_said_once_recorded_and_the_items_asked_again_in_the_prompt(tmp_path):
    lines: list[str] = []
    with FakeOpenAIServer(ignore_response_format=True) as server:
        cfg = cfg_for(server, concurrency=4)
        run = annotate(feedback(12), cfg, api_key=KEY, cache_dir=tmp_path, progress=False, log=lines.append)
        schema_asked = [r for r in server.requests if "response_format" in r]
        reasked = [r for r in server.requests if _prompted(r)]
        again = annotate(feedback(12), cfg, api_key=KEY, cache_dir=tmp_path, progress=False, log=lines.append)
        requests_after_rerun = server.n_requests
    assert set(run.frame["status"]) == {"ok"}, run.frame["error"].tolist()
    n = len(schema_asked)  # every answer to the schema was prose: 8 decided it, the others were in flight
    assert 8 <= n < 12 and len(reasked) == 12 and server.n_requests == requests_after_rerun == n + 12
    assert not any("response_format" in r for r in reasked)
    assert lines == [LINE.format(n=8, m=8)] and run.stats["notes"] == lines  # one line, from the first 8 answers
    assert run.stats["structured_output"] == "ignored" and run.stats["answer_formats"] == {"prompted_json": 12}
    # the re-run: every answer from the cache (the prose was replaced), the same rows, and the record says how
    assert again.stats["requests"] == 0 and again.stats["cache_hits"] == 12
    assert again.frame.drop(columns="latency_s").equals(run.frame.drop(columns="latency_s"))
    assert again.stats["structured_output"] == "ignored"
    with AnswerCache(tmp_path) as cache:
        assert len(cache) == 12


def test_a_small_run_decides_on_the_answers_it_has():
    lines: list[str] = []
    with FakeOpenAIServer(ignore_response_format=True) as server:
        run = annotate(feedback(2), cfg_for(server), api_key=KEY, progress=False, log=lines.append)
    assert set(run.frame["status"]) == {"ok"} and lines == [LINE.format(n=2, m=2)] and server.n_requests == 4


def test_json_schema_only_says_so_and_asks_nothing_else():
    lines: list[str] = []
    with FakeOpenAIServer(ignore_response_format=True) as server:
        cfg = cfg_for(server, structured_output="json_schema")
        run = annotate(feedback(3), cfg, api_key=KEY, progress=False, log=lines.append)
    assert run.frame["status"].tolist() == ["parse_error"] * 3 and run.frame["raw"].tolist() == [PROSE] * 3
    assert server.n_requests == 3 and not any(_prompted(r) for r in server.requests)
    assert len(lines) == 1 and "3 of 3 answers were not JSON" in lines[0]
    assert "structured_output=json_schema keeps asking" in lines[0]
    assert run.stats["structured_output"] == "ignored"


def test_prose_left_in_the_cache_by_a_failed_re_ask_is_asked_again_next_run(tmp_path):
    """The re-ask fails (the server errs on prompted requests): the prose stays cached, marked as an answer to the
    schema; the next run counts it as evidence, and asks those items again instead of serving the prose."""

    def erring(request: dict) -> str | Reply:
        return Reply(status=500, content="down") if _prompted(request) else PROSE

    with FakeOpenAIServer(answer=erring) as server:
        first = annotate(feedback(3), cfg_for(server, max_retries=0), api_key=KEY, cache_dir=tmp_path, progress=False)
    assert first.frame["status"].tolist() == ["api_error"] * 3
    lines: list[str] = []
    with FakeOpenAIServer(ignore_response_format=True) as server:
        cfg = cfg_for(server, max_retries=0)
        second = annotate(feedback(3), cfg, api_key=KEY, cache_dir=tmp_path, progress=False, log=lines.append)
    assert set(second.frame["status"]) == {"ok"} and second.stats["cache_hits"] == 3
    assert server.n_requests == 3 and all(_prompted(r) for r in server.requests)
    assert lines == [LINE.format(n=3, m=3)]


def test_an_honest_server_with_a_few_prose_answers_is_not_taken_for_one_that_ignores_the_schema(tmp_path):
    """A server that honours the schema and now and then answers badly (here every fifth answer is prose) keeps the
    schema: those items are parse_errors, asked once."""
    seen: list[int] = []

    def sometimes_prose(request: dict) -> str:
        seen.append(1)
        return PROSE if len(seen) % 5 == 0 else quoting_answer(request)

    lines: list[str] = []
    with FakeOpenAIServer(answer=sometimes_prose) as server:
        cfg = cfg_for(server, concurrency=1)
        run = annotate(feedback(20), cfg, api_key=KEY, cache_dir=tmp_path, progress=False, log=lines.append)
    assert run.frame["status"].tolist().count("parse_error") == 4 and server.n_requests == 20 and not lines
    assert run.stats["structured_output"] is True and run.stats["answer_formats"] == {"json_schema": 20}


@pytest.mark.parametrize(
    ("content", "is_json"),
    [
        ('{"critique": "ok"}', True),
        ('  \n{"critique": "ok"', True),  # truncated JSON still opens an object
        ('```json\n{"critique": "ok"}\n```', True),
        ("\n\n\n\n", False),  # what a tiny random model answers
        ("", False),
        (None, False),
        ("I'm ready to help! Here is the critique: {...}", False),
    ],
)
def test_what_counts_as_an_answer_that_honours_the_schema(content, is_json):
    assert opens_json(content) is is_json


def test_the_check_needs_most_of_its_window():
    check = SchemaCheck(window=8)
    for prose in [False, True] * 4:  # half prose: not most
        check.observe(PROSE if prose else "{}")
    assert not check.decide(expected=100)
    check.observe(PROSE)  # the window slides: 5 of the last 8
    assert check.decide(expected=100) and not check.decide(expected=100)  # said once
    assert check.prose == 5 and check.checked == 9


def test_the_json_instruction_goes_at_the_end_of_the_last_turn():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    out = with_json_instruction(messages)
    assert out[0] == messages[0] and out[1]["content"].startswith("u\n\n" + JSON_INSTRUCTION)
    assert '"poor_spans"' in out[1]["content"] and messages[1]["content"] == "u"
