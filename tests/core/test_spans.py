"""Golden cases for span parsing, span location, token labels and offsets of sampled ids."""

from __future__ import annotations

import _tokenizers  # tests/core is on sys.path (rootdir-relative test modules)
import pytest

from t2g_core.config.align import AlignConfig
from t2g_core.spans import (
    AlignedSpan,
    ParsedFeedback,
    align_feedback,
    decode_with_offsets,
    labels_for_offsets,
    locate_spans,
    parse_span_json,
    squeeze,
    token_labels,
    token_labels_batch,
    token_offsets_from_ids,
)

# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "critique", "good", "poor"),
    [
        ('{"critique": "fine", "good_spans": ["a b"], "poor_spans": []}', "fine", ["a b"], []),
        (
            'Let me think. The post is about {Paris}.\n{"critique": "c", "good_spans": [], "poor_spans": ["x"]}',
            "c",
            [],
            ["x"],
        ),
        (
            'Reasoning first.\n```json\n{"critique": "c", "good_spans": ["g"], "poor_spans": ["p"]}\n```\nHope this '
            "helps!",
            "c",
            ["g"],
            ["p"],
        ),
        (
            '{"critique": "c", "good_spans": ["g"], "poor_spans": ["p"]} and then some trailing words {',
            "c",
            ["g"],
            ["p"],
        ),
        ("{'critique': 'it\\'s wrong', 'good_spans': ['g'], 'poor_spans': ['p']}", "it's wrong", ["g"], ["p"]),
        (
            '{"critique": "says \\"Berlin\\"", "good_spans": [], "poor_spans": ["\\"Berlin\\" is"]}',
            'says "Berlin"',
            [],
            ['"Berlin" is'],
        ),
        ('{"critique": "c", "good_spans": ["g",], "poor_spans": ["p",],}', "c", ["g"], ["p"]),
        ('{"critique": "cut off", "good_spans": ["first", "sec', "cut off", ["first", "sec"], []),
        ('{"textual_feedback": "tf", "good_spans": ["g"], "poor_spans": ["p"]}', "tf", ["g"], ["p"]),
        (
            '```json\n{"Code Feedback": "loop is off by one", "wrong_code": ["range(n - 1)"], "improvement_code": '
            '["x = 0"]}\n```',
            "loop is off by one",
            ["x = 0"],
            ["range(n - 1)"],
        ),
        ('{"code_feedback": "cf", "wrong_code": "return a - b", "improvement_code": []}', "cf", [], ["return a - b"]),
        ('[{"critique": "in a list", "good_spans": ["g"], "poor_spans": []}]', "in a list", ["g"], []),
        ('{"critique": "c", "good_spans": [], "poor_spans": ["he said "hi" to me"]}', "c", [], ['he said "hi" to me']),
        (
            'Sure! Here is the JSON:\n{\n  "critique": "c",\n  "good_spans": ["a"],\n  "poor_spans": null\n}\nLet me '
            "know.",
            "c",
            ["a"],
            [],
        ),
    ],
)
def test_parse_accepts_messy_output(text, critique, good, poor):
    parsed = parse_span_json(text)
    assert parsed.status == "ok", parsed.error
    assert (parsed.critique, parsed.good_spans, parsed.poor_spans) == (critique, good, poor)
    assert parsed.raw == text and parsed.error is None


def test_parse_skips_code_fences_and_brace_text_before_the_json():
    text = (
        "The loop is wrong:\n```python\nfor i in range(n - 1):\n    d = {'k': i}\n```\n"
        'So:\n```json\n{"code_feedback": "off by one", "wrong_code": ["range(n - 1)"], "improvement_code": []}\n```'
    )
    parsed = parse_span_json(text)
    assert parsed.ok and parsed.poor_spans == ["range(n - 1)"] and parsed.critique == "off by one"
    assert parsed.reasoning.startswith("The loop is wrong:")


def test_parse_keeps_reasoning_before_json():
    parsed = parse_span_json(
        'Step 1: the post says Paris.\nStep 2: wrong city.\n```json\n{"critique": "c", "good_spans": [], '
        '"poor_spans": []}\n```'
    )
    assert parsed.reasoning == "Step 1: the post says Paris.\nStep 2: wrong city."
    assert parse_span_json('{"critique": "c", "reasoning": "r", "good_spans": []}').reasoning == "r"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (None, "empty"),
        ("   ", "empty"),
        ("I cannot help with that.", "no JSON object"),
        ("[1, 2, 3]", "no JSON object"),
        ('{"critique": "only a critique"}', "no good_spans/poor_spans"),
        ('{"critique": "cut off before the spans", "good_sp', "no good_spans/poor_spans"),
        ('{"critique": "c", "good_spans": {"a": 1}, "poor_spans": []}', "good_spans is a dict"),
        ('{"critique": "c", "good_spans": [], "poor_spans": [["nested"]]}', "poor_spans[0] is a list"),
    ],
)
def test_parse_failure_is_a_value_with_reason(text, reason):
    parsed = parse_span_json(text)
    assert parsed.status == "parse_error"
    assert reason in parsed.error
    assert parsed.good_spans == [] and parsed.poor_spans == []


class _OverBudget(BaseException):
    """Past the allowed work: a BaseException, so no parser's ``except Exception`` hides it and a quadratic parser
    fails at once instead of running for minutes."""


@pytest.fixture
def decode_budget(monkeypatch):
    """Counts every JSON decode (``JSONDecoder.raw_decode``, which ``json.loads`` calls too) and every json_repair
    call with the characters it is given; more than 100 decodes or a second repair raises :class:`_OverBudget`."""
    import json

    import json_repair

    seen = {"decodes": 0, "repairs": 0, "repaired_chars": 0}
    raw_decode, repair = json.JSONDecoder.raw_decode, json_repair.loads

    def decode(self, s, idx=0):
        seen["decodes"] += 1
        if seen["decodes"] > 100:
            raise _OverBudget(seen)
        return raw_decode(self, s, idx)

    def repaired(text, *args, **kwargs):
        seen["repairs"] += 1
        seen["repaired_chars"] += len(text)
        if seen["repairs"] > 1:
            raise _OverBudget(seen)
        return repair(text, *args, **kwargs)

    monkeypatch.setattr(json.JSONDecoder, "raw_decode", decode)
    monkeypatch.setattr(json_repair, "loads", repaired)
    return seen


HOSTILE = {
    '2 KB of {"': '{"' * 1000,  # took 200 s: every suffix parsed, then repaired
    '200,000 chars of {"': '{"' * 100_000,  # annotate.max_answer_chars: every suffix copied (about 10 GB)
    "nested 100,000 deep": '{"critique": "c", "good_spans": ' + "[" * 100_000,  # deeper than Python's stack
    "nested 3,000 deep, short enough to repair": '{"good_spans": ' + "[" * 3_000,
    "objects in objects": '{"x": [' * 30_000 + '{"b": 1},' * 5_000,  # each start decodes to the end
    "5,000 fences": "```json\n{'a': \n```" * 5_000,
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_answers_are_a_parse_error_after_bounded_work(decode_budget, text):
    """At most 64 places are decoded (in place, each at most once) and json_repair, whose time grows with the square
    of its input, runs once on at most 4,000 characters (spans.parsing.MAX_CANDIDATES, MAX_REPAIR_CHARS)."""
    parsed = parse_span_json(text)
    assert parsed.status == "parse_error" and "no JSON object with critique/span keys" in parsed.error
    assert parsed.raw == text
    assert decode_budget["decodes"] <= 66 and decode_budget["repairs"] <= 1
    assert decode_budget["repaired_chars"] <= 4_000
    if len(text) > 4_000:  # the error says why nothing was repaired
        assert "too long to repair: over 4000" in parsed.error


def test_parsing_the_longest_answer_takes_memory_of_its_size_not_its_square():
    import tracemalloc

    text = '{"' * 100_000  # 200,000 characters: annotate.max_answer_chars
    tracemalloc.start()
    try:
        assert parse_span_json(text).status == "parse_error"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(text), peak  # a copy or two at most (each suffix copied: 20 GB)


def test_an_answer_behind_json_fragments_is_found_strict_or_repaired():
    text = "He built {'k': i} and {\"a\": 1}.\nFinal:\n{'critique': 'c', 'good_spans': ['g',], 'poor_spans': []}"
    parsed = parse_span_json(text)
    assert parsed.ok and (parsed.critique, parsed.good_spans) == ("c", ["g"])
    strict = '{"b": 1} ' * 10 + '{"critique": "c", "good_spans": [], "poor_spans": ["p"]}'
    assert parse_span_json(strict).poor_spans == ["p"]


# ---------------------------------------------------------------- locating spans


def one(response: str, span: str, **kw) -> AlignedSpan:
    return locate_spans(response, [span], "negative", **kw)[0]


def at(response: str, a: AlignedSpan) -> str:
    assert a.start is not None, a
    return response[a.start : a.end]


def test_exact_match_has_exact_offsets():
    r = "The summary says Berlin but the post says Paris."
    a = one(r, "says Berlin")
    assert (a.start, a.end, a.match, a.score) == (12, 23, "exact", 100.0)


def test_curly_quotes_and_apostrophes_both_ways():
    r = "She said “it’s fine” and left."
    a = one(r, 'said "it\'s fine"')
    assert a.match == "normalized" and at(r, a) == "said “it’s fine”"
    r2 = 'She said "it\'s fine" and left.'
    b = one(r2, "said “it’s fine”")
    assert b.match == "normalized" and at(r2, b) == 'said "it\'s fine"'


def test_repeated_phrase_takes_first_unclaimed_occurrence():
    r = "very good start, very good end"
    a, b, c = locate_spans(r, ["very good", "very good", "very good"], "positive")
    assert (a.start, b.start) == (0, 17)
    assert c.start == 0  # every occurrence claimed: the first, never dropped
    # claimed intervals are shared between the good and poor lists of one item
    spans = align_feedback(r, (["very good"], ["very good"]))
    assert [s.start for s in spans] == [0, 17] and [s.label for s in spans] == ["positive", "negative"]


def test_repeated_phrase_with_context_picks_the_matching_occurrence():
    r = "the start is very good. the end is very good."
    a = one(r, "very good", context="the end is very good")
    assert a.start == r.rindex("very good")


def test_span_across_newlines_and_whitespace_runs():
    r = "First line ends here\nand the second\n\n   line starts here."
    a = one(r, "ends here and the second line starts")
    assert a.match == "normalized" and at(r, a) == "ends here\nand the second\n\n   line starts"


def test_code_indentation_change():
    r = "def f(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n"
    a = one(r, "for x in xs:\n    total += x")
    assert a.match == "normalized" and at(r, a) == "for x in xs:\n        total += x"
    b = one(r, "for x in xs: total += x")
    assert at(r, b) == "for x in xs:\n        total += x"


def test_markdown_emphasis_on_either_side():
    r = "The answer is **definitely Paris**, not `Berlin`."
    a = one(r, "definitely Paris, not Berlin")
    assert a.match == "normalized" and at(r, a) == "definitely Paris**, not `Berlin"
    r2 = "The answer is definitely Paris."
    b = one(r2, "**definitely Paris**")
    assert b.match == "normalized" and at(r2, b) == "definitely Paris"
    r3 = "It is **definitely Paris**, not snake_case_name."
    assert at(r3, one(r3, "**Definitely paris**")) == "**definitely Paris**"  # quoted with markers: markers included
    assert at(r3, one(r3, "definitely  PARIS")) == "definitely Paris"
    assert at(r3, one(r3, "NOT snake_")) == "not snake"  # never widened across a snake_case join


def test_emoji_and_cjk():
    r = "結論：東京は首都です 😀👍🏽 Great job!"
    assert at(r, one(r, "東京は首都")) == "東京は首都"
    a = one(r, "😀👍🏽 great JOB")
    assert a.match == "normalized" and at(r, a) == "😀👍🏽 Great job"


def test_compatibility_forms_and_case_folding():
    r = "The ﬁnal ＡＮＳＷＥＲ is STRASSE."
    a = one(r, "final answer")
    assert a.match == "normalized" and at(r, a) == "ﬁnal ＡＮＳＷＥＲ"
    assert at(r, one(r, "is straße")) == "is STRASSE"


def test_absent_span_is_unmatched_not_dropped():
    r = "The summary says Berlin but the post says Paris."
    spans = locate_spans(r, ["says Berlin", "mentions the weather in Rome", "a b"], "negative")
    assert [s.match for s in spans] == ["exact", "unmatched", "unmatched"]
    assert spans[1].start is None and spans[1].end is None and spans[1].text == "mentions the weather in Rome"


def test_letters_of_separate_words_never_join():
    r = "about the cat"
    assert one(r, "a bout").match == "unmatched"
    assert one(r, "thecat").match == "unmatched"


def test_empty_and_whitespace_spans_are_unmatched():
    spans = locate_spans("some text", ["", "   ", "\n"], "positive")
    assert [(s.match, s.start, s.score) for s in spans] == [("unmatched", None, 0.0)] * 3


def test_span_equal_to_whole_response_and_padded_span():
    r = "Paris is the capital of France."
    assert (one(r, r).start, one(r, r).end, one(r, r).match) == (0, len(r), "exact")
    a = one(r, "  Paris is the capital  ")
    assert (a.start, a.end, a.match) == (0, len("Paris is the capital"), "exact")


def test_fuzzy_match_covers_whole_words_above_threshold_only():
    r = "The patient was prescribed amoxicillin for ten days by the doctor."
    a = one(r, "prescribed amoxicilin for ten days")
    assert a.match == "fuzzy" and 85 <= a.score < 100
    assert at(r, a) == "prescribed amoxicillin for ten days"
    assert one(r, "prescribed amoxicilin for ten days", fuzzy_threshold=99).match == "unmatched"
    assert one(r, "amoxicilin", min_fuzzy_chars=20).match == "unmatched"


def test_fuzzy_never_matches_a_quote_much_longer_than_the_response():
    r = "Paris is lovely."
    assert one(r, "Paris is lovely in spring, says everyone who has been there").match == "unmatched"


def test_fuzzy_window_in_cjk_is_not_widened_to_the_whole_run():
    r = "前文です。東京は日本の首都であり人口が多い都市です。後文です。"
    a = one(r, "東京は日本の首都でありし人口")  # one extra character: not exact, not normalised
    assert a.match == "fuzzy"
    assert len(at(r, a)) <= len("東京は日本の首都であり人口") + 2


def test_align_feedback_uses_config_and_parsed_feedback():
    r = "alpha beta gamma delta"
    parsed = ParsedFeedback("c", ["alpha beta"], ["gamma delte"])
    spans = align_feedback(r, parsed, AlignConfig(fuzzy_threshold=80))
    assert [(s.label, s.match) for s in spans] == [("positive", "exact"), ("negative", "fuzzy")]
    assert align_feedback(r, parsed, AlignConfig(fuzzy_threshold=99))[1].match == "unmatched"


def test_squeeze_fast_path_agrees_with_per_character_definition():
    from t2g_core.spans.locate import _squeeze_slow

    for text in ["Plain ASCII *md* `code`\n\tend", "東京 😀 “q” — x", "a\u00a0b\u2003c"]:
        fast, src = squeeze(text)
        slow, slow_src = _squeeze_slow(text)
        assert fast == slow and list(src) == slow_src


# ---------------------------------------------------------------- token labels


@pytest.fixture(scope="module")
def bpe():
    return _tokenizers.byte_level_bpe()


@pytest.fixture(scope="module")
def wordpiece():
    return _tokenizers.wordpiece()


@pytest.fixture(scope="module")
def unigram():
    return _tokenizers.unigram_metaspace()


def _naive_labels(offsets, spans, values=(1.0, -1.0, 0.0)):
    """Plain-loop twin: poor wins, zero-width tokens never labelled."""
    out = []
    for a, b in offsets:
        hit = {s.label for s in spans if s.start is not None and a < b and a < s.end and s.start < b}
        out.append(values[1] if "negative" in hit else values[0] if "positive" in hit else values[2])
    return out


@pytest.mark.parametrize("tok_name", ["bpe", "wordpiece", "unigram"])
def test_token_labels_overlap_and_poor_wins(tok_name, request):
    tok = request.getfixturevalue(tok_name)
    r = "The summary says Berlin but the post says Paris. 😀 中文"
    spans = align_feedback(r, (["says Berlin but the post", "中文"], ["Berlin", "absent span here"]))
    labels = token_labels(r, spans, tok)
    offsets = tok(r, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    assert len(labels) == len(offsets)
    assert labels == _naive_labels(offsets, spans)
    assert -1.0 in labels and 1.0 in labels and 0.0 in labels
    good_wins = token_labels(r, spans, tok, overlap="good_wins")
    berlin = [i for i, (a, b) in enumerate(offsets) if a < 23 and 17 < b]
    assert all(labels[i] == -1.0 for i in berlin) and all(good_wins[i] == 1.0 for i in berlin)


def test_label_values_are_configurable(bpe):
    r = "good part and bad part"
    spans = align_feedback(r, (["good part"], ["bad part"]))
    labels = token_labels(r, spans, bpe, {"positive": 0.5, "negative": -2.0, "neutral": 0.1})
    assert set(labels) == {0.5, -2.0, 0.1}
    with pytest.raises(ValueError, match="overlap"):
        token_labels(r, spans, bpe, overlap="nobody_wins")
    with pytest.raises(ValueError, match="unknown label value"):
        token_labels(r, spans, bpe, {"good": 1.0})
    cfg = AlignConfig(positive_value=2.0, negative_value=-3.0, overlap="good_wins")
    both = align_feedback(r, (["good part and bad"], ["bad part"]))
    from_cfg = token_labels(r, both, bpe, cfg)
    assert set(from_cfg) == {2.0, -3.0} and from_cfg == token_labels(
        r, both, bpe, {"positive": 2.0, "negative": -3.0}, overlap="good_wins"
    )


def test_batch_labels_equal_single_labels(bpe):
    responses = ["alpha beta gamma", "delta 😀 epsilon", ""]
    aligned = [align_feedback(r, (["beta"], ["😀"])) for r in responses]
    assert token_labels_batch(responses, aligned, bpe) == [
        token_labels(r, a, bpe) for r, a in zip(responses, aligned, strict=True)
    ]


def test_chat_template_labels_only_response_tokens(bpe):
    prompt = "<|endoftext|>user: Where does Alice live? says Berlin<|endoftext|>assistant: "
    response = "Alice lives in Berlin, she says Berlin."
    full = prompt + response
    spans = align_feedback(response, ([], ["says Berlin"]))
    enc = bpe(full, add_special_tokens=False, return_offsets_mapping=True)
    labels = labels_for_offsets(enc["offset_mapping"], spans, base=len(prompt))
    flagged = [i for i, v in enumerate(labels) if v]
    assert flagged and all(enc["offset_mapping"][i][0] >= len(prompt) + spans[0].start - 1 for i in flagged)
    ids = enc["input_ids"]
    specials = [i for i, t in enumerate(ids) if t == bpe.eos_token_id]
    assert specials and all(labels[i] == 0.0 for i in specials)


# ---------------------------------------------------------------- offsets of sampled ids


@pytest.mark.parametrize("tok_name", ["bpe", "unigram", "wordpiece"])
def test_offsets_from_ids_match_decoded_text(tok_name, request):
    tok = request.getfixturevalue(tok_name)
    ids = tok("Emoji 😀👍🏽 in 中文字符 and “quotes”, naïve café.", add_special_tokens=False)["input_ids"]
    text, offsets = decode_with_offsets(ids, tok)
    assert text == tok.decode(ids, clean_up_tokenization_spaces=False)
    assert len(offsets) == len(ids) and offsets == token_offsets_from_ids(ids, tok)
    assert offsets[0][0] == 0 and offsets[-1][1] == len(text)
    assert all(a <= b for a, b in offsets) and all(
        x[0] <= y[0] and x[1] <= y[1] for x, y in zip(offsets, offsets[1:], strict=False)
    )
    for tid, (a, b) in zip(ids, offsets, strict=True):  # a whole token's own text is what its interval holds
        piece = tok.decode([tid], clean_up_tokenization_spaces=False)
        if "\ufffd" not in piece and tok_name == "bpe":
            assert text[a:b] == piece


def test_multibyte_char_split_across_byte_level_tokens(bpe):
    ids = bpe("x 👍🏽 y", add_special_tokens=False)["input_ids"]
    pieces = [bpe.decode([i]) for i in ids]
    assert any("\ufffd" in p for p in pieces), (
        "the emoji should be split into byte tokens for this test to mean anything"
    )
    text, offsets = decode_with_offsets(ids, bpe)
    thumb = text.index("👍")
    covering = [i for i, (a, b) in enumerate(offsets) if a <= thumb < b]
    partial = [i for i, p in enumerate(pieces) if "\ufffd" in p]
    assert set(partial) <= set(covering) | {i for i, (a, b) in enumerate(offsets) if a <= thumb + 1 < b}
    spans = [AlignedSpan("👍🏽", "positive", thumb, thumb + 2, "exact", 100.0)]
    labels = labels_for_offsets(offsets, spans)
    assert all(labels[i] == 1.0 for i in partial)
    assert labels[0] == 0.0 and labels[-1] == 0.0


def test_skipped_special_tokens_get_zero_width(bpe):
    ids = bpe("hello world", add_special_tokens=False)["input_ids"] + [bpe.eos_token_id]
    text, offsets = decode_with_offsets(ids, bpe, skip_special_tokens=True)
    assert text == "hello world" and offsets[-1] == (len(text), len(text))
    text2, offsets2 = decode_with_offsets(ids, bpe)
    assert text2.endswith("<|endoftext|>") and offsets2[-1] == (len("hello world"), len(text2))
