"""Reward-model prompt builder, targets and rm_data rows (fast: tokenizer only)."""

from __future__ import annotations

import pandas as pd
import pytest

from t2g_core.config.reward_model import RewardModelConfig
from t2g_core.reward_model.data import build_rm_data, split_for_id
from t2g_core.reward_model.prompts import (
    TRUNCATION_MARK,
    build_rm_prompt,
    build_rm_target,
    count_tokens,
    render_rm_prompt,
)
from t2g_core.spans import parse_span_json

POST = "I am Cai. I live in Quito. I have 3 pets. All of them are dogs. Their fur is gray. I work as a coach."
SUMMARY = "Cai lives in Paris with 3 gray dogs and works as a coach."


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _feedback(rows):
    base = {"critique": None, "reference": None, "tests": None, "entry_point": None, "meta": None}
    return pd.DataFrame([{**base, **r} for r in rows])


def _annotation(item_id, good, poor, status="ok", critique="c"):
    return {
        "id": item_id,
        "annotator": "reference",
        "critique": critique,
        "good_spans": good,
        "poor_spans": poor,
        "reasoning": None,
        "status": status,
        "error": None if status == "ok" else "boom",
        "raw": None,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "latency_s": 0.0,
    }


def test_prompt_uses_chat_template_and_ends_on_generation_prompt(tok):
    text = build_rm_prompt(tok, "summarization", POST, SUMMARY, 384)
    expected = tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True)
    tail = expected.split("x", 1)[1]  # what the template writes after the user content
    assert text.endswith(tail)
    assert POST in text and SUMMARY in text
    assert text.index(POST) < text.index(SUMMARY)


def test_tasks_have_distinct_prompts_and_unknown_task_is_an_error(tok):
    texts = {t: build_rm_prompt(tok, t, "p", "r", 384) for t in ("summarization", "code", "qa")}
    assert len(set(texts.values())) == 3
    with pytest.raises(ValueError, match="unknown task 'poetry'"):
        build_rm_prompt(tok, "poetry", "p", "r", 384)


def test_truncation_cuts_content_and_keeps_template_tail(tok):
    long_post = " ".join([POST] * 40)
    long_summary = " ".join([SUMMARY] * 40)
    short = build_rm_prompt(tok, "summarization", "P", "R", 384)
    tail = short.split("\nR", 1)[1]  # end of the user turn + assistant header
    for post, summary in [(long_post, SUMMARY), (POST, long_summary), (long_post, long_summary)]:
        shown = render_rm_prompt(tok, "summarization", post, summary, 260)
        assert shown.truncated
        assert shown.n_tokens <= 260
        assert count_tokens(tok, shown.text) == shown.n_tokens
        assert shown.text.endswith(tail), "the template tail (assistant header) must survive truncation"
        assert "### Summary" in shown.text and "Answer with JSON only" in shown.text
        assert TRUNCATION_MARK in shown.text
        # the kept content is a prefix of the original
        assert post.startswith(shown.prompt.removesuffix(TRUNCATION_MARK))
        assert summary.startswith(shown.response.removesuffix(TRUNCATION_MARK))
    # a short response is never cut to make room for a long post
    shown = render_rm_prompt(tok, "summarization", long_post, SUMMARY, 260)
    assert shown.response == SUMMARY


def test_budget_smaller_than_template_is_a_clear_error(tok):
    with pytest.raises(ValueError, match="max_prompt_tokens=40"):
        render_rm_prompt(tok, "summarization", POST * 5, SUMMARY, 40)


def test_target_is_critique_then_spans_then_eos_and_parses_back(tok):
    target = build_rm_target('The summary says "Paris"; the post says Quito.', ["Cai"], ["Paris"], tok.eos_token)
    assert target.endswith(tok.eos_token)
    body = target.removesuffix(tok.eos_token)
    assert body.index('"critique"') < body.index('"good_spans"') < body.index('"poor_spans"')
    parsed = parse_span_json(body)
    assert parsed.status == "ok"
    assert parsed.critique == 'The summary says "Paris"; the post says Quito.'
    assert (parsed.good_spans, parsed.poor_spans) == (["Cai"], ["Paris"])
    ids = tok(target, add_special_tokens=False)["input_ids"]
    assert ids[-1] == tok.eos_token_id and ids.count(tok.eos_token_id) == 1


def test_split_is_a_deterministic_function_of_the_id():
    ids = [f"sum-{i:05d}" for i in range(2000)]
    first = [split_for_id(i, 0.2) for i in ids]
    assert first == [split_for_id(i, 0.2) for i in reversed(ids)][::-1]
    frac = first.count("validation") / len(ids)
    assert 0.16 < frac < 0.24
    assert {split_for_id(i, 0.0) for i in ids} == {"train"}


def test_rm_data_rows_quote_the_response_exactly_and_count_what_was_dropped(tok, tmp_path):
    fb = _feedback(
        [
            {"id": "a", "task": "summarization", "prompt": POST, "response": SUMMARY},
            {"id": "b", "task": "summarization", "prompt": POST, "response": SUMMARY},
            {"id": "c", "task": "summarization", "prompt": POST, "response": SUMMARY},
        ]
    )
    ann = pd.DataFrame(
        [
            _annotation("a", ["3 gray dogs", "COACH"], ["paris", "a unicorn farm"]),  # case differs; one invented span
            _annotation("b", [], [], status="api_error"),
            _annotation("c", ["Cai"], []),
        ]
    )
    cfg = RewardModelConfig(kind="generative", val_fraction=0.0)
    df, stats = build_rm_data(fb, ann, tok, cfg)
    assert list(df.columns) == ["id", "split", "rm_prompt", "rm_target"]
    assert df["id"].tolist() == ["a", "c"]
    assert stats.n_no_ok_annotation == 1 and stats.skipped_ids == ["b"]
    assert stats.n_spans_unmatched == 1 and stats.n_spans_kept == 4
    row = df.iloc[0]
    assert row.rm_prompt == build_rm_prompt(tok, "summarization", POST, SUMMARY, cfg.max_prompt_tokens)
    parsed = parse_span_json(row.rm_target.removesuffix(tok.eos_token))
    assert parsed.good_spans == ["3 gray dogs", "coach"]  # the response's own text, not the annotator's casing
    assert parsed.poor_spans == ["Paris"]
    from t2g_core.store import write_parquet

    write_parquet(df, tmp_path / "rm.parquet", "rm_data")  # the rows satisfy the rm_data schema


def test_spans_cut_off_by_truncation_are_dropped(tok):
    long_summary = SUMMARY + " " + " ".join(["Filler words that go on."] * 60) + " The end is Lima."
    fb = _feedback([{"id": "a", "task": "summarization", "prompt": POST, "response": long_summary}])
    ann = pd.DataFrame([_annotation("a", ["Cai"], ["Lima"])])
    df, stats = build_rm_data(
        fb, ann, tok, RewardModelConfig(kind="generative", max_prompt_tokens=260, val_fraction=0.0)
    )
    parsed = parse_span_json(df.iloc[0].rm_target.removesuffix(tok.eos_token))
    assert stats.n_prompt_truncated == 1 and stats.n_spans_truncated == 1
    assert (parsed.good_spans, parsed.poor_spans) == (["Cai"], [])
