"""Property-based tests (hypothesis) for span location and token labels."""

from __future__ import annotations

import _tokenizers  # tests/core is on sys.path (rootdir-relative test modules)
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from t2g_core.spans import (
    AlignedSpan,
    decode_with_offsets,
    labels_for_offsets,
    locate_spans,
    squeeze,
    token_labels,
)
from t2g_core.spans.locate import _collapse

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
ALPHABET = (
    LETTERS + "   \n\t.,;:!?()-'\"*_`éß中文😀’“”ж🚀"
)  # ж and 🚀 are not in the tokenizer corpus: split into byte tokens
DROPPED = set(" \n\t*_`")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

texts = st.text(alphabet=ALPHABET, min_size=1, max_size=160)


@st.composite
def text_and_slice(draw, strategy=texts):
    text = draw(strategy)
    i = draw(st.integers(0, len(text) - 1))
    j = draw(st.integers(i + 1, len(text)))
    return text, i, j


@given(text_and_slice())
@SETTINGS
def test_exact_substrings_come_back_with_exact_offsets(case):
    text, i, j = case
    needle = text[i:j].strip()
    assume(needle)
    (a,) = locate_spans(text, [text[i:j]], "positive")
    assert a.match == "exact" and a.score == 100.0
    assert (a.start, a.end) == (text.find(needle), text.find(needle) + len(needle))


QUOTE_SWAP = {"'": "’", "’": "'", '"': "“", "“": '"', "”": '"'}


@st.composite
def perturbed(draw):
    """A text, a substring [i, j) whose ends are not whitespace/markdown, and a case/space/quote-perturbed copy."""
    text, i, j = draw(text_and_slice())
    assume(text[i] not in DROPPED and text[j - 1] not in DROPPED)
    out, k, sub = [], 0, text[i:j]
    while k < len(sub):
        ch = sub[k]
        if ch.isspace():
            while k < len(sub) and sub[k].isspace():
                k += 1
            out.append(draw(st.sampled_from([" ", "\n", "  ", "\t ", " \n    "])))
            continue
        if ch in QUOTE_SWAP and draw(st.booleans()):
            ch = QUOTE_SWAP[ch]
        elif ch.isascii() and ch.isalpha() and draw(st.booleans()):
            ch = ch.swapcase()
        out.append(ch)
        k += 1
    pad = draw(st.sampled_from(["", " ", "\n"]))
    return text, i, j, pad + "".join(out) + pad


@given(perturbed())
@SETTINGS
def test_perturbed_copies_come_back_normalized_with_original_offsets(case):
    text, i, j, span = case
    (a,) = locate_spans(text, [span], "negative")
    assert a.match in ("exact", "normalized"), (text, span, a)
    if a.match == "exact":  # the perturbed copy happens to occur verbatim (maybe elsewhere): exact wins
        assert text[a.start : a.end] == span.strip()
        return
    assert span.strip() not in text
    assert _collapse(text[a.start : a.end]) == _collapse(text[i:j])
    needle, _ = squeeze(span)
    hay, _ = squeeze(text)
    places = sum(hay.startswith(needle, k) for k in range(len(hay)))  # overlapping ones too ('aa' twice in '0aaa')
    if places == 1:  # one place it can be: it must be exactly the original substring
        assert (a.start, a.end) == (i, j)
    else:
        assert a.start <= i


INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"  # zero-width space / joiners, word joiner, BOM, soft hyphen
_VISIBLE = str.maketrans(dict.fromkeys(INVISIBLE))


@st.composite
def with_invisibles(draw, text):
    """``text`` with invisible characters slipped in at random places (inside words too)."""
    out = []
    for ch in text:
        if draw(st.integers(0, 4)) == 0:
            out.append(draw(st.text(alphabet=INVISIBLE, min_size=1, max_size=2)))
        out.append(ch)
    return "".join(out)


@st.composite
def hidden_words(draw):
    """A text, a substring with visible ends, and one side (the response or the quote) salted with invisibles."""
    text, i, j = draw(text_and_slice(st.text(alphabet=LETTERS + " .,'", min_size=1, max_size=80)))
    quote = text[i:j].strip()
    assume(quote)
    if draw(st.booleans()):
        return draw(with_invisibles(text)), quote
    return text, draw(with_invisibles(quote))


@given(hidden_words())
@SETTINGS
def test_quotes_match_through_zero_width_characters_and_soft_hyphens_with_exact_offsets(case):
    """Before: ``Par\u00adis`` or ``Ber\u200blin`` in a response left the quote ``Paris`` unmatched (a poor span
    silently dropped: reward evasion against an LLM critic)."""
    response, quote = case
    (a,) = locate_spans(response, [quote], "negative")
    assert a.match in ("exact", "normalized"), (response, quote, a)
    found = response[a.start : a.end]
    assert found.translate(_VISIBLE) == quote.translate(_VISIBLE)  # the offsets are into the original response
    assert found[0] not in INVISIBLE and found[-1] not in INVISIBLE  # and start and end on visible characters


@given(st.text(alphabet=LETTERS + " ", min_size=20, max_size=120), st.text(alphabet="QXZJ", min_size=12, max_size=30))
@SETTINGS
def test_absent_spans_are_unmatched(text, absent):
    assume(absent.casefold() not in text.casefold())
    (a,) = locate_spans(text, [absent], "negative")
    assert a.match == "unmatched" and a.start is None


# ---------------------------------------------------------------- token labels for several tokenizers


@pytest.fixture(scope="module")
def tokenizers():
    return {
        "bpe": _tokenizers.byte_level_bpe(),
        "wordpiece": _tokenizers.wordpiece(),
        "unigram": _tokenizers.unigram_metaspace(),
    }


def naive_labels(offsets, spans):
    """Plain-loop twin of labels_for_offsets: poor wins, zero-width tokens never labelled."""
    out = []
    for a, b in offsets:
        hit = {s.label for s in spans if a < b and a < s.end and s.start < b}
        out.append(-1.0 if "negative" in hit else 1.0 if "positive" in hit else 0.0)
    return out


@st.composite
def text_and_spans(draw):
    text = draw(texts)
    spans = []
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(text) - 1))
        j = draw(st.integers(i + 1, len(text)))
        spans.append(AlignedSpan(text[i:j], draw(st.sampled_from(["positive", "negative"])), i, j, "exact", 100.0))
    return text, spans


@pytest.mark.parametrize("name", ["bpe", "wordpiece", "unigram"])
def test_token_labels_cover_exactly_overlapping_tokens(name, tokenizers):
    tok = tokenizers[name]

    @given(text_and_spans())
    @SETTINGS
    def check(case):
        text, spans = case
        offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        assert token_labels(text, spans, tok) == naive_labels(offsets, spans)

    check()


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=30), text_and_spans())
@SETTINGS
def test_labels_for_unsorted_offsets(raw, case):
    offsets = [(a, a + n) for a, n in raw]  # arbitrary order, zero-width and overlapping tokens included
    _, spans = case
    assert labels_for_offsets(offsets, spans) == naive_labels(offsets, spans)


@given(text_and_spans())
@SETTINGS
def test_offsets_from_sampled_ids_give_the_same_labels(tokenizers, case):
    """Byte-level BPE: labels from prefix-decoded offsets of the ids == labels from the tokenizer's offset mapping
    on every token that is not whitespace only (the tokenizer trims whitespace out of its offsets)."""
    tok = tokenizers["bpe"]
    text, spans = case
    spans = [s for s in spans if not text[s.start].isspace() and not text[s.end - 1].isspace()]
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    decoded, offsets = decode_with_offsets(enc["input_ids"], tok)
    assert decoded == text
    ours = labels_for_offsets(offsets, spans)
    theirs = token_labels(text, spans, tok)
    keep = [k for k, (a, b) in enumerate(enc["offset_mapping"]) if text[a:b].strip()]
    assert [ours[k] for k in keep] == [theirs[k] for k in keep]


@pytest.mark.parametrize("name", ["bpe", "wordpiece", "unigram"])
def test_windowed_decoding_equals_decoding_every_prefix(name, tokenizers):
    """The linear sliding-window offsets equal the quadratic every-prefix definition, ids cut anywhere."""
    from t2g_core.spans.labels import _close_tail, _offsets_from_ends, _prefix_ends

    tok = tokenizers[name]
    kw = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}

    @given(texts, st.integers(0, 400), st.integers(1, 4))
    @SETTINGS
    def check(text, cut, window):
        ids = tok(text * 3, add_special_tokens=False)["input_ids"]
        ids = ids[: max(1, cut % (len(ids) + 1))]
        assume(ids)
        decoded, offsets = decode_with_offsets(ids, tok, window=window)
        assert offsets == _offsets_from_ends(_close_tail(_prefix_ends(ids, tok, kw, decoded), decoded))
        assert offsets[-1][1] == len(decoded)

    check()
