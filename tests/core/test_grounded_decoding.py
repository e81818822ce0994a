"""Grounded decoding: whatever tokens a model picks among the allowed ones, every quote it writes is a substring of
the response, the output stays the span JSON, and tokens that cross a quote's end or split a character are judged
exactly. The "model" here is a seeded random chooser, so the property is tested over arbitrary decoding paths."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from t2g_core.reward_model.grounded import START, GroundedSpansProcessor, Grounding, TokenIndex, token_bytes
from t2g_core.spans import align_feedback
from tests.core._tokenizers import byte_level_bpe, unigram_metaspace

ALPHABET = st.sampled_from(list('abc de,."\\\n') + ["é", "中", "文", "😀", "Ω", "ß", "\t", "'"])
RESPONSES = st.text(alphabet=ALPHABET, min_size=1, max_size=40)


@pytest.fixture(scope="module")
def bpe():
    return byte_level_bpe()


@pytest.fixture(scope="module")
def bpe_index(bpe):
    return TokenIndex(bpe)


def _random_decode(index: TokenIndex, response: str, seed: int, max_tokens: int = 200) -> tuple[bytes, bool]:
    """Pick allowed tokens at random (structural ones more often, so runs finish); returns the bytes and whether the
    output ended with EOS."""
    rng, grounding, state, out = random.Random(seed), Grounding(response), START, b""
    for _ in range(max_tokens):
        allowed = index.allowed(grounding, state)
        assert allowed, f"no token allowed after {out!r}"
        if allowed == [index.eos]:
            return out, True
        closing = [i for i in allowed if index.bytes[i][:1] in (b'"', b"]", b"}", b",")]
        token = rng.choice(closing if closing and rng.random() < 0.3 else allowed)
        state = grounding.walk(state, index.bytes[token])
        assert state is not None, f"an allowed token was refused: {index.bytes[token]!r}"
        out += index.bytes[token]
    return out, False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(response=RESPONSES, seed=st.integers(0, 10**6))
def test_every_quote_is_a_substring_of_the_response(bpe_index, response, seed):
    out, finished = _random_decode(bpe_index, response, seed)
    if not finished:
        return
    obj = json.loads(out.decode("utf-8"))
    assert set(obj) == {"critique", "good_spans", "poor_spans"}
    for quote in obj["good_spans"] + obj["poor_spans"]:
        assert quote.strip() and quote in response
    aligned = align_feedback(response, (obj["good_spans"], obj["poor_spans"]))
    assert all(s.match == "exact" for s in aligned)  # every quote is placed, none left unmatched


def test_random_decoding_finishes_and_quotes_multibyte_text(bpe_index):
    response = 'Emoji 😀 and CJK 中文字符, a "quoted" word\nand a backslash \\ too.'
    finished = [json.loads(out.decode()) for out, done in (_random_decode(bpe_index, response, s) for s in range(40))]
    quotes = [q for obj in finished for q in obj["good_spans"] + obj["poor_spans"]]
    assert len(finished) >= 20 and quotes
    assert all(q in response for q in quotes)
    assert any(any(ord(c) > 127 for c in q) for q in quotes), "no quote crossed a multi-byte character"


def test_a_token_that_closes_a_quote_early_on_a_space_cannot_escape():
    g = Grounding("Paris is nice")
    state = g.walk(START, b'{"critique": "x", "good_spans": ["Paris')
    assert state is not None
    assert g.walk(state, b'", "') is not None  # close and open the next quote: structure kept
    assert g.walk(state, b" is") is not None  # continue inside the quote: still a substring
    assert g.walk(state, b" was") is None  # leaves the response
    assert g.walk(state, b'" was') is None  # closes, then text that is not list structure
    assert g.walk(state, b'"]}') is None  # a poor_spans list must follow
    assert g.walk(state, b'"], "poor_spans": []}') is not None


def test_a_quote_is_written_no_more_often_than_the_response_holds_it():
    head = b'{"critique": "", "good_spans": ["Paris"'
    once, twice = Grounding("Paris is nice"), Grounding("Paris and Paris")
    assert once.walk(START, head + b', "Paris"') is None  # its one occurrence is already quoted
    assert once.walk(START, head + b', "Paris is"') is not None  # a longer quote is still free
    assert twice.walk(START, head + b', "Paris"') is not None
    assert twice.walk(START, head + b'], "poor_spans": ["Paris", "Paris"') is None
    assert once.walk(START, b'{"critique": "", "good_spans": ["  "') is None  # blank: nothing to place


def test_escapes_are_unescaped_before_the_substring_check():
    g = Grounding('say "hi"\nthen')
    ok = g.walk(START, b'{"critique": "", "good_spans": [], "poor_spans": ["say \\"hi\\"\\nthen"]}')
    assert ok is not None and ok.mode == "end"
    assert g.walk(START, b'{"critique": "", "good_spans": ["say "hi') is None  # a raw quote ends the string
    assert g.walk(START, b'{"critique": "", "good_spans": ["\\u0073ay"]') is not None  # \\u0073 = s
    assert g.walk(START, b'{"critique": "", "good_spans": ["\\q') is None


def test_a_surrogate_escape_is_refused_at_its_second_digit_before_it_is_a_dead_end():
    """``\\ud9`` can only become a surrogate, which no quote or critique may hold: refused there, in the critique too,
    so a decoder never reaches ``\\ud9A`` with no byte allowed after it (found by the property test above)."""
    g = Grounding("Paris")
    assert g.walk(START, b'{"critique": "\\ud') is not None and g.walk(START, b'{"critique": "\\ud7ff') is not None
    assert g.walk(START, b'{"critique": "\\ud9') is None and g.walk(START, b'{"critique": "\\uDC') is None
    assert g.walk(START, b'{"critique": "", "good_spans": ["\\ud8') is None


def test_empty_quotes_and_half_characters_cannot_be_closed():
    g = Grounding("中文")
    head = b'{"critique": "", "good_spans": ["'
    assert g.walk(START, head + b'"') is None
    assert g.walk(START, head + "中".encode()[:2] + b'"') is None
    assert g.walk(START, head + "中".encode() + b'"') is not None
    assert Grounding("").walk(START, head) is None  # nothing to quote: only empty lists


def test_sentencepiece_tokens_map_to_bytes():
    tok = unigram_metaspace()
    data = token_bytes(tok)
    text = "naïve café"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert b"".join(data[i] for i in ids).decode("utf-8").strip() == text


def test_the_processor_masks_rows_independently(bpe):
    import torch

    index = TokenIndex(bpe)
    prefix = bpe('{"critique": "ok", "good_spans": ["', add_special_tokens=False)["input_ids"]
    proc = GroundedSpansProcessor(index, ["alpha beta", "gamma"], prompt_length=1)
    ids = torch.tensor([[0, *prefix], [0, *prefix]])
    out = proc(ids, torch.zeros(2, len(index.bytes)))
    allowed = [set(torch.isfinite(out[row]).nonzero().flatten().tolist()) for row in range(2)]
    starts_with = {c: {i for i, b in enumerate(index.bytes) if b and b[:1] == c} for c in (b"b", b"g")}
    assert starts_with[b"b"] & allowed[0] and not starts_with[b"b"] & allowed[1]
    assert starts_with[b"g"] & allowed[1] and not starts_with[b"g"] & allowed[0]
    assert index.eos not in allowed[0]  # EOS only after the closing brace
