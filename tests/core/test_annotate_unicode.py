"""Nothing one item or its answer does stops an annotation run: it becomes that item's status.

Before: one LLM answer holding a lone surrogate (``"\\ud800"``, JSON's escape for half a UTF-16 pair) aborted the
run with a raw pyarrow ``UnicodeEncodeError`` naming no item, and since the answer was cached every re-run aborted
the same way; a grounding item without a human critique stopped the whole run; an exception while caching one
answer stopped every other. A property test feeds random Unicode, lone surrogates included, through annotate and
align: every item gets a storable row and every placed span lies inside its response.
"""

from __future__ import annotations

import json
import uuid

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from t2g_core.annotators import annotate
from t2g_core.annotators.cache import AnswerCache
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.schemas import ANNOTATIONS, SPANS, STATUSES, to_arrow, validate_frame
from t2g_core.spans import align_frame
from t2g_core.testing import FakeOpenAIServer, quoting_answer
from tests.core.test_annotate_llm import cfg_for, feedback

KEY = "sk-test-unicode-0123456789"
SPAN_JSON = '{{"reasoning": "r", "critique": {critique}, "good_spans": [], "poor_spans": [{poor}]}}'


def _by_item(answers: dict[int, str]):
    """A server script: the answer for item ``it-00N`` (found in its prompt), else a valid quoting answer."""

    def answer(request: dict) -> str:
        text = request["messages"][-1]["content"]
        for n, content in answers.items():
            if f"Post number {n}:" in text:
                return content
        return quoting_answer(request)

    return answer


ANSWERS = {
    1: SPAN_JSON.format(critique='"fine"', poor='"Lisbon \\ud800"'),  # an escaped surrogate inside a quote
    2: SPAN_JSON.format(critique='"bad \ud83d"', poor='"Rex"'),  # a raw one: the server sends it as \ud83d
    3: "Thinking \udfff done.\n" + SPAN_JSON.format(critique='"fine"', poor='"Rex"'),  # in the reasoning text
}


def test_lone_surrogates_in_answers_are_item_statuses_and_a_rerun_from_the_cache_does_not_abort(tmp_path):
    df = feedback(5)
    with FakeOpenAIServer(answer=_by_item(ANSWERS)) as server:
        cfg = cfg_for(server)
        first = annotate(df, cfg, api_key=KEY, cache_dir=tmp_path / "cache", progress=False).frame
        sent = server.n_requests
        again = annotate(df, cfg, api_key=KEY, cache_dir=tmp_path / "cache", progress=False).frame
    assert sent == 5 and server.n_requests == 5  # the re-run was answered from the cache, and did not abort
    pd.testing.assert_frame_equal(first.drop(columns="latency_s"), again.drop(columns="latency_s"))
    assert list(first["status"]) == ["ok", "parse_error", "parse_error", "parse_error", "ok"]
    errors = first["error"].tolist()
    assert "poor_spans[0] holds a lone surrogate U+D800" in errors[1]
    assert "critique holds a lone surrogate U+D83D" in errors[2]
    assert "raw holds a lone surrogate U+DFFF" in errors[3]
    assert first["poor_spans"][1] == ["Lisbon \ufffd"] and "\ufffd" in first["raw"][3]  # replaced, one for one
    pq.write_table(to_arrow(validate_frame(first, ANNOTATIONS, "a"), ANNOTATIONS), tmp_path / "a.parquet")
    spans = align_frame(df, first)
    assert set(spans["id"]) == {"it-000", "it-004"}


def test_a_grounding_item_without_a_human_critique_is_its_own_status(tmp_path):
    df = feedback(3, critique="The dog's name is wrong.")
    df.loc[1, "critique"] = None
    with FakeOpenAIServer() as server:
        frame = annotate(df, cfg_for(server, mode="grounding"), api_key=KEY, progress=False).frame
    assert server.n_requests == 2  # nothing was sent for it
    assert list(frame["status"]) == ["ok", "parse_error", "ok"]
    assert frame["error"][1].startswith("not sent: item 'it-001': grounding mode needs a human critique")


def test_a_failure_while_caching_one_answer_is_that_items_status(tmp_path, monkeypatch):
    put = AnswerCache.put

    def full_disk_for_item_2(self, key, answer):
        if "2 cats" in (answer.get("content") or ""):
            raise OSError(28, "No space left on device")
        return put(self, key, answer)

    monkeypatch.setattr(AnswerCache, "put", full_disk_for_item_2)

    def echo(request: dict) -> str:  # an answer quoting item 2's response, so the failing put can tell it apart
        return quoting_answer(request).replace('"critique"', f'"note": "{_user_count(request)} cats", "critique"')

    with FakeOpenAIServer(answer=echo) as server:
        frame = annotate(feedback(4), cfg_for(server), api_key=KEY, cache_dir=tmp_path / "c", progress=False).frame
    assert list(frame["status"]) == ["ok", "ok", "api_error", "ok"]
    assert "No space left on device" in frame["error"][2]


def _user_count(request: dict) -> int:
    text = request["messages"][-1]["content"]
    return int(text.split("Lisbon with ")[1].split(" cats")[0])


# ---- property: random Unicode through annotate -> align --------------------------------------------------------

VALID_CHAR = st.characters(exclude_categories=("Cs",))  # what a feedback file can hold
ANY_CHAR = st.one_of(VALID_CHAR, st.characters(categories=["Cs"]))  # lone surrogates, often


def any_text(max_size: int = 20) -> st.SearchStrategy[str]:
    """Random text with lone surrogates (``st.text`` leaves them out whatever its alphabet)."""
    return st.lists(ANY_CHAR, max_size=max_size).map("".join)


SCRIPTED: dict[str, str] = {}  # marker in the prompt -> the answer's content


@pytest.fixture(scope="module")
def scripted_server():
    def answer(request: dict) -> str:
        text = request["messages"][-1]["content"]
        return next((content for marker, content in SCRIPTED.items() if marker in text), "")

    with FakeOpenAIServer(answer=answer) as server:
        yield server


@st.composite
def items(draw):
    """Feedback rows with random valid responses, and for each an answer: random text (lone surrogates too), quotes
    cut from the response or made up, sent as escaped JSON or with the raw characters in the prose around it."""
    rows, answers = [], {}
    for k in range(draw(st.integers(1, 3))):
        response = draw(st.text(VALID_CHAR, max_size=60))
        cuts = sorted(draw(st.lists(st.integers(0, len(response)), min_size=2, max_size=2)))
        quotes = [response[cuts[0] : cuts[1]], draw(any_text(12))]
        payload = {
            "reasoning": draw(any_text()),
            "critique": draw(any_text()),
            "good_spans": quotes[:1],
            "poor_spans": quotes[1:],
        }
        body = json.dumps(payload, ensure_ascii=draw(st.booleans()))
        content = draw(st.sampled_from([body, draw(any_text(10)) + body, draw(any_text(40))]))
        marker = uuid.uuid4().hex
        rows.append({"id": f"u{k}", "task": "qa", "prompt": marker, "response": response, "meta": None})
        answers[marker] = content
    return rows, answers


@given(items())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_unicode_goes_through_annotate_and_align(scripted_server, tmp_path, case):
    rows, answers = case
    SCRIPTED.clear()
    SCRIPTED.update(answers)
    df = pd.DataFrame(rows)
    for col in ("critique", "reference", "tests", "entry_point"):
        df[col] = None
    cfg = AnnotateConfig(annotator="llm", base_url=scripted_server.base_url, model="m", max_retries=0, timeout_s=5)
    frame = annotate(df, cfg, api_key=KEY, progress=False).frame
    assert list(frame["id"]) == list(df["id"]) and set(frame["status"]) <= set(STATUSES)
    to_arrow(validate_frame(frame, ANNOTATIONS, "annotations"), ANNOTATIONS)  # storable: valid Unicode only
    spans = align_frame(df, frame)
    to_arrow(validate_frame(spans, SPANS, "spans"), SPANS)
    responses = dict(zip(df["id"], df["response"], strict=True))
    for span in spans[spans["match"] != "unmatched"].itertuples():
        assert 0 <= span.start < span.end <= len(responses[span.id])
        if span.match == "exact":
            assert responses[span.id][span.start : span.end] == span.text.strip()


@given(st.lists(st.tuples(st.text(VALID_CHAR, max_size=80), st.text(VALID_CHAR, max_size=80)), min_size=1, max_size=3))
@settings(max_examples=60, deadline=None)
def test_random_unicode_goes_through_the_reference_critic_and_align(pairs):
    df = pd.DataFrame(
        [
            {"id": f"r{i}", "task": "qa", "prompt": "p", "response": response, "reference": reference}
            for i, (response, reference) in enumerate(pairs)
        ]
    )
    for col in ("critique", "tests", "entry_point", "meta"):
        df[col] = None
    frame = annotate(df, AnnotateConfig(annotator="reference"), progress=False).frame
    assert list(frame["id"]) == list(df["id"]) and set(frame["status"]) <= set(STATUSES)
    to_arrow(validate_frame(frame, ANNOTATIONS, "annotations"), ANNOTATIONS)
    spans = align_frame(df, frame)
    for span in spans[spans["match"] != "unmatched"].itertuples():
        assert 0 <= span.start < span.end <= len(df.set_index("id").loc[span.id, "response"])
