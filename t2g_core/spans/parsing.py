"""Parsing the span JSON an annotator or reward model wrote into a :class:`ParsedFeedback` (the package's step 1)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any

import json_repair

POSITIVE, NEGATIVE = "positive", "negative"
DEFAULT_VALUES: dict[str, float] = {POSITIVE: 1.0, NEGATIVE: -1.0, "neutral": 0.0}


@dataclass(frozen=True)
class ParsedFeedback:
    """A critique with the spans it quotes; ``status`` is "ok" or a failure status with ``error`` saying why."""

    critique: str | None
    good_spans: list[str] = field(default_factory=list)
    poor_spans: list[str] = field(default_factory=list)
    reasoning: str | None = None
    status: str = "ok"
    error: str | None = None
    raw: str | None = None
    outcome: float | None = None  # a critic's overall verdict in [-1, 1] (code: from the pass rate), when it has one
    degenerate: bool = False  # no real attempt: empty, crashes its harness, hangs past its timer (worst of all)
    missing: tuple[str, ...] = ()  # required content the response leaves out (facts, behaviour), for omission rewards
    # where each missing item belonged: a char offset into the response (None = unknown: the reward goes at the end)
    missing_at: tuple[int | None, ...] = ()
    # word-level labels in response order, [(word, score)] with score in {-1, 0, 1} (the paper's dense ablation and
    # its SLF5K reward model's ``word_score_list``); None = this critic does not label words
    word_scores: tuple[tuple[str, float], ...] | None = None
    # (start, end, label) char spans of the response, when the source knows where its spans are (a token tagger):
    # used as they are instead of searching the response for the quotes
    located: tuple[tuple[int, int, str], ...] = ()
    # per located span, the share in [0, 1] of an ensemble's heads that agree on it (() = one head, or not a tagger):
    # PPO scales the span's token rewards by it, so a label the heads dispute pays and costs less
    located_weights: tuple[float, ...] = ()
    # how sure the source is of these labels, in [0, 1] (a tagger: the probability of its least sure token's label);
    # None = the source gives no confidence
    confidence: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# Key spellings seen in the reference code and in LLM output, after lower-casing and "-"/" " -> "_".
CRITIQUE_KEYS = ("critique", "textual_feedback", "code_feedback", "feedback", "summary")
GOOD_KEYS = ("good_spans", "improvement_code", "good", "positive_spans")
POOR_KEYS = ("poor_spans", "wrong_code", "poor", "bad_spans", "negative_spans")
REASONING_KEYS = ("reasoning", "analysis", "chain_of_thought", "thoughts")
WORD_KEYS = ("word_score_list", "word_scores")
MISSING_KEYS = ("missing", "missing_content", "omissions", "omitted")
_KNOWN_KEYS = frozenset(CRITIQUE_KEYS + GOOD_KEYS + POOR_KEYS + WORD_KEYS)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_OBJECT_START = re.compile(r"\{\s*[\"'`]")
_SPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()
MAX_CANDIDATES = 64  # places decoded as the start of the span JSON (each decode reads at most the rest of the text)
MAX_REPAIR_CHARS = 4_000  # the most text json_repair is given: its time grows as the square (hostile 4,000: ~1 s)


def _norm_key(key: object) -> str:
    return re.sub(r"[\s\-]+", "_", str(key).strip().lower())


def _pick(obj: Mapping[str, Any], keys: Sequence[str]) -> tuple[bool, Any]:
    for key in keys:
        if key in obj:
            return True, obj[key]
    return False, None


def _as_span_list(value: Any, name: str) -> list[str]:
    """Spans as a list of strings; a bare string is one span. Raises ValueError naming the bad item."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise ValueError(f"{name} is a {type(value).__name__}, expected a list of strings")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, Mapping):  # {"text": "..."} / {"span": "..."}
            item = item.get("text", item.get("span", item.get("quote")))
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str):
            raise ValueError(f"{name}[{i}] is a {type(item).__name__}, expected a string")
        out.append(item)
    return out


def _known_dict(value: Any) -> dict[str, Any] | None:
    """The first JSON object (possibly inside a list) that has at least one span-JSON key, keys normalised."""
    candidates = value if isinstance(value, list) else [value]
    for cand in candidates:
        if isinstance(cand, Mapping):
            obj = {_norm_key(k): v for k, v in cand.items()}
            if _KNOWN_KEYS & obj.keys():
                return obj
    return None


def _candidates(text: str) -> Iterator[tuple[int, int]]:
    """(where to decode, where its source starts) of each candidate: fenced blocks first, then each ``{"``."""
    for m in _FENCE.finditer(text):
        yield _SPACE.match(text, m.start(1)).end(), m.start()
    for m in _OBJECT_START.finditer(text):
        yield m.start(), m.start()


def _find_object(text: str) -> tuple[dict[str, Any] | None, int, str]:
    """Locate and decode the span-JSON object in ``text``: fenced blocks first, then each ``{"`` in order.

    Returns (object or None, where its source starts, why none was found or ""). At most ``MAX_CANDIDATES`` are decoded
    in place, so the work is linear; json_repair runs once, on the text from the first failed candidate, only up to
    ``MAX_REPAIR_CHARS`` (its time grows with the square of its input on hostile text)."""
    failed = None
    for at, source in islice(_candidates(text), MAX_CANDIDATES):
        try:
            value, _ = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
            failed = failed or (at, source)
            continue
        if (obj := _known_dict(value)) is not None:
            return obj, source, ""
    if failed is None:
        return None, -1, ""
    at, source = failed
    if len(text) - at > MAX_REPAIR_CHARS:
        return None, -1, f" (not valid JSON from character {at}, and too long to repair: over {MAX_REPAIR_CHARS})"
    try:
        return _known_dict(json_repair.loads(text[at:])), source, ""
    except Exception:  # noqa: BLE001 - a repair failure (RecursionError included) is just "no object"
        return None, -1, ""


def _clean_reasoning(text: str) -> str | None:
    text = re.sub(r"```[a-zA-Z]*\s*$", "", text.strip()).strip()
    return text or None


def parse_span_json(text: str | None) -> ParsedFeedback:
    """Parse annotator or reward-model output into a :class:`ParsedFeedback`; never raises.

    Accepts reasoning before the JSON, fences, trailing text, near-JSON and the reference code's alternative keys
    (``textual_feedback``, ``wrong_code``, ``improvement_code``...). Text that is not valid Unicode is a
    ``parse_error``."""
    return valid_text(_parse_span_json(text))


def _parse_span_json(text: str | None) -> ParsedFeedback:
    if text is None or not str(text).strip():
        return ParsedFeedback(None, status="parse_error", error="empty output", raw=text)
    text = str(text)
    obj, pos, why = _find_object(text)
    if obj is None:
        return ParsedFeedback(
            None, status="parse_error", error=f"no JSON object with critique/span keys found{why}", raw=text
        )
    has_good, good = _pick(obj, GOOD_KEYS)
    has_poor, poor = _pick(obj, POOR_KEYS)
    has_words, words = _pick(obj, WORD_KEYS)
    _, critique = _pick(obj, CRITIQUE_KEYS)
    if not (has_good or has_poor or has_words):
        return ParsedFeedback(
            _text_or_none(critique), status="parse_error", error="no good_spans/poor_spans key", raw=text
        )
    try:
        good_spans, poor_spans = _as_span_list(good, "good_spans"), _as_span_list(poor, "poor_spans")
        word_scores = _as_word_scores(words) if has_words else None
        missing = tuple(_as_span_list(_pick(obj, MISSING_KEYS)[1], "missing"))
    except ValueError as exc:
        return ParsedFeedback(_text_or_none(critique), status="parse_error", error=str(exc), raw=text)
    _, reasoning = _pick(obj, REASONING_KEYS)
    reasoning = _text_or_none(reasoning) or _clean_reasoning(text[:pos])
    return ParsedFeedback(
        _text_or_none(critique), good_spans, poor_spans, reasoning, raw=text, missing=missing, word_scores=word_scores
    )


def _as_word_scores(value: Any) -> tuple[tuple[str, float], ...]:
    """``[[word, score], ...]`` (or ``[{"word": w, "score": s}]``) as (word, score) pairs, score clipped to [-1, 1]."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"word_score_list is a {type(value).__name__}, expected a list of [word, score] pairs")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, Mapping):
            item = [item.get("word"), item.get("score")]
        ok = isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
        score = item[1] if ok else None
        if not ok or isinstance(score, bool) or not isinstance(score, (int, float)) or score != score:
            raise ValueError(f"word_score_list[{i}] is not a [word, number] pair")
        out.append((item[0], max(-1.0, min(1.0, float(score)))))
    return tuple(out)


def _text_or_none(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
    return value.strip() or None


def valid_text(parsed: ParsedFeedback) -> ParsedFeedback:
    """``parsed`` with every lone surrogate (JSON's ``\\ud800`` escapes; not valid Unicode, so no artifact can store
    it) replaced by U+FFFD. An ``ok`` one that held any becomes a ``parse_error`` naming where: its text is not what
    the annotator meant, and a quote holding one could never match the response."""
    from t2g_core.schemas import replace_surrogates, surrogate_in

    fields = {
        "critique": parsed.critique,
        "good_spans": parsed.good_spans,
        "poor_spans": parsed.poor_spans,
        "reasoning": parsed.reasoning,
        "missing": parsed.missing,
        "word_scores": [w for w, _ in parsed.word_scores or ()],
        "raw": parsed.raw,
        "error": parsed.error,
    }
    found = surrogate_in(fields)
    if found is None:
        return parsed

    def fix(text: str | None) -> str | None:
        return None if text is None else replace_surrogates(text)[0]

    where, at, code = found
    error = fix(parsed.error)
    if parsed.ok:
        error = f"the answer is not valid Unicode: {where} holds a lone surrogate {code} at character {at}"
        error += " (replaced by U+FFFD)"
    return replace(
        parsed,
        critique=fix(parsed.critique),
        good_spans=[fix(s) for s in parsed.good_spans],
        poor_spans=[fix(s) for s in parsed.poor_spans],
        reasoning=fix(parsed.reasoning),
        status="parse_error" if parsed.ok else parsed.status,
        error=error,
        raw=fix(parsed.raw),
        missing=tuple(fix(m) for m in parsed.missing),
        word_scores=None if parsed.word_scores is None else tuple((fix(w), s) for w, s in parsed.word_scores),
    )
