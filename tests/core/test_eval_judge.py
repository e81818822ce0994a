"""Pairwise judge over real HTTP (the local OpenAI-compatible test server) with scripted verdicts."""

from __future__ import annotations

import json
import re

import pytest
from openai import OpenAI

from t2g_core.evaluation.judge import PairwiseJudge, combine, parse_verdict, win_rate
from t2g_core.testing import FakeOpenAIServer, Reply

ANSWERS = re.compile(r"## Answer 1\n(.*?)\n\n## Answer 2\n(.*?)\n\nWhich", re.S)


def _answers(request) -> tuple[str, str]:
    m = ANSWERS.search(request["messages"][-1]["content"])
    assert m, request
    return m.group(1), m.group(2)


def fair_judge(request) -> str:
    """Prefers the answer that says Paris; a tie when both or neither do."""
    first, second = ("Paris" in a for a in _answers(request))
    winner = "tie" if first == second else "1" if first else "2"
    return json.dumps({"reason": "scripted", "winner": winner})


PROMPTS = ["Capital of France?"] * 3
BASELINE = ["Lyon.", "Paris.", "Paris."]
CANDIDATE = ["Paris.", "It is Paris.", "Rome."]  # win, tie, loss


def _judge(server, **kw) -> PairwiseJudge:
    return PairwiseJudge(OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=5), "judge", **kw)


def test_both_orders_are_asked_and_combined():
    with FakeOpenAIServer(answer=fair_judge) as server:
        out = _judge(server, concurrency=1).judge(PROMPTS, BASELINE, CANDIDATE)
        seen = [_answers(r) for r in server.requests]
    assert [j.outcome for j in out] == ["win", "tie", "loss"]
    assert [j.score for j in out] == [1.0, 0.5, 0.0]
    assert [(j.verdict_ab, j.verdict_ba) for j in out] == [("2", "1"), ("tie", "tie"), ("1", "2")]
    assert len(seen) == 6
    for i in range(3):  # each item shown baseline-first, then candidate-first
        assert seen[2 * i] == (BASELINE[i], CANDIDATE[i]) and seen[2 * i + 1] == (CANDIDATE[i], BASELINE[i])
    rate = win_rate(out)
    assert rate["win_rate"] == pytest.approx(1.5 / 3) and (rate["wins"], rate["ties"], rate["losses"]) == (1, 1, 1)
    assert rate["position_disagreements"] == 0


def test_a_position_biased_judge_yields_ties_not_wins():
    with FakeOpenAIServer(answer=lambda req: '{"winner": "1"}') as server:
        out = _judge(server, concurrency=2).judge(PROMPTS, BASELINE, CANDIDATE)
    assert [j.outcome for j in out] == ["tie"] * 3
    rate = win_rate(out)
    assert rate["win_rate"] == 0.5 and rate["position_disagreements"] == 3


def test_failed_items_are_kept_with_a_status_and_left_out_of_the_rate():
    def script(req):
        first, _ = _answers(req)
        if "Lyon" in first or "Lyon" in _answers(req)[1]:
            return Reply(status=500, content="boom")
        if "Rome" in req["messages"][-1]["content"]:
            return "I cannot decide, both are fine"
        return fair_judge(req)

    with FakeOpenAIServer(answer=script) as server:
        out = _judge(server).judge(PROMPTS, BASELINE, CANDIDATE)
    assert [j.status for j in out] == ["api_error", "ok", "parse_error"]
    assert out[0].score is None and "500" in out[0].error
    rate = win_rate(out)
    assert rate["judged"] == 1 and rate["failed"] == 2 and rate["win_rate"] == 0.5


def test_parse_verdict_and_combine():
    assert parse_verdict('{"winner": "2"}') == "2"
    assert parse_verdict('reasoning first... {"reason": "x", "winner": "tie"') == "tie"  # malformed JSON repaired
    assert parse_verdict(" Tie. ") == "tie"
    with pytest.raises(ValueError, match="no winner"):
        parse_verdict('{"winner": "both"}')
    assert (
        combine("2", "1") == (1.0, "win")
        and combine("2", "2") == (0.5, "tie")
        and combine("tie", "2") == (0.25, "loss")
    )


def test_a_reply_nested_deeper_than_the_stack_is_a_parse_error_of_its_item():
    deep = '{"winner": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(ValueError, match="no winner"):
        parse_verdict(deep)
    with FakeOpenAIServer(
        answer=lambda req: deep if "Rome" in req["messages"][-1]["content"] else fair_judge(req)
    ) as s:
        out = _judge(s).judge(PROMPTS, BASELINE, CANDIDATE)
    assert [j.status for j in out] == ["ok", "ok", "parse_error"] and "no winner" in out[2].error


def test_every_request_carries_max_tokens_and_failed_items_keep_error_and_replies():
    def script(req):
        if "Rome" in req["messages"][-1]["content"]:
            return "I cannot decide, both are fine"
        return fair_judge(req)

    with FakeOpenAIServer(answer=script) as server:
        out = _judge(server, max_tokens=64).judge(PROMPTS, BASELINE, CANDIDATE)
        assert {r.get("max_tokens") for r in server.requests} == {64}
    assert out[2].status == "parse_error" and out[2].reply_ab == out[2].reply_ba == "I cannot decide, both are fine"
    assert out[0].status == "ok" and json.loads(out[0].reply_ab)["winner"] == "2"


def test_an_api_error_keeps_the_servers_own_words():
    detail = "judge model not loaded"
    with FakeOpenAIServer(answer=lambda req: Reply(status=400, content=detail), error_style="fastapi") as server:
        out = _judge(server).judge(PROMPTS[:1], BASELINE[:1], CANDIDATE[:1])
    assert out[0].status == "api_error" and out[0].error == f"HTTP 400: {detail}"


def test_nothing_judged_is_reported_as_not_judged_never_as_a_nan_rate():
    """Before: "win rate nan% ... -> no clear difference" when every request failed."""
    import pandas as pd

    from t2g_core.evaluation.report import comparison_table
    from t2g_core.evaluation.results import add_judge_scores, judge_summary

    items = pd.DataFrame(
        [
            {"policy": p, "id": f"q{i}", "sample": 0, "prompt": "Capital of France?", "response": r}
            for p, answers in (("base", BASELINE), ("tuned", CANDIDATE))
            for i, r in enumerate(answers)
        ]
    )
    with FakeOpenAIServer(answer=lambda req: Reply(status=400, content="context too long"), error_style="fastapi") as s:
        judge = _judge(s)
        assert win_rate(judge.judge(PROMPTS, BASELINE, CANDIDATE))["win_rate"] is None
        scored = add_judge_scores(items, judge, "base")
    assert scored.loc[scored["policy"] == "tuned", "judge_error"].tolist() == ["HTTP 400: context too long"] * 3
    summary = {"policies": {}, "baseline": "base", "task": "qa", "judge": judge_summary(scored, "base")}
    j = summary["judge"]["tuned"]
    assert j["verdict"] == "not judged" and j["win_rate"] is None and j["judged"] == 0
    text = comparison_table(summary)
    assert "judge: tuned vs base: not judged (3 items failed: HTTP 400: context too long)" in text
    assert "nan" not in text.lower()
