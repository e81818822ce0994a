"""Critique spans: parse the span JSON, locate quoted spans in the response, label tokens.

Pipeline (the "align" stage):

1. :func:`parse_span_json` turns annotator / reward-model text into a :class:`ParsedFeedback`
   (``{"critique", "good_spans", "poor_spans"}``, optionally preceded by reasoning). A failure is a value with
   ``status="parse_error"`` and a reason, never an exception.
2. :func:`locate_spans` maps each quoted span to half-open character offsets ``(start, end)`` in the response:
   exact ``str.find`` first; then a normalised match (case, whitespace runs, curly quotes, NFKD compatibility forms,
   markdown emphasis, code indentation) whose offsets are mapped back to the original text exactly; then a rapidfuzz
   partial alignment above a threshold. A span that cannot be placed is returned as ``unmatched``, never dropped.
   Repeated phrases: the first occurrence whose interval is not yet claimed (or, given ``context``, the occurrence
   whose surroundings best match it), so the choice is deterministic.
3. :func:`token_labels` / :func:`labels_for_offsets` turn spans into one label per token from the fast tokenizer's
   offset mapping: a token is labelled when its character interval overlaps a span (``a < end and start < b``);
   a token inside both a good and a poor span gets the poor label unless ``overlap="good_wins"``.
   :func:`token_offsets_from_ids` / :func:`decode_with_offsets` give the offsets of *given* ids (PPO's sampled
   tokens) in their decoded text by incremental (sliding-window) decoding, never by re-encoding; with
   ``labels_for_offsets`` they place span rewards on exactly the tokens the policy sampled.
4. :func:`align_frame` is the align stage on frames (annotations -> ``spans`` artifact rows);
   :func:`spans_by_item` reads such rows back into :class:`AlignedSpan` lists.

Deliberate deviations from the reference code (``microsoft/Text2Grad``): no whitespace-split words,
no per-token decoding and lowercase word matching, no greedy monotonic word walk, and unmatched spans are kept.
"""

from __future__ import annotations

import json
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import json_repair
import numpy as np
from rapidfuzz import fuzz

if TYPE_CHECKING:
    from t2g_core.config.align import AlignConfig

POSITIVE, NEGATIVE = "positive", "negative"
DEFAULT_VALUES: dict[str, float] = {POSITIVE: 1.0, NEGATIVE: -1.0, "neutral": 0.0}


# ----------------------------------------------------------------------------------------------------------------
# 1. Parsing the span JSON
# ----------------------------------------------------------------------------------------------------------------


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


def _find_object(text: str) -> tuple[dict[str, Any] | None, int]:
    """Locate and decode the span-JSON object in ``text``: fenced blocks first, then each ``{"`` in order.

    Returns (object, char index where its source starts) or (None, -1). json_repair fixes single quotes, trailing
    commas, unescaped characters, truncation and trailing text.
    """
    starts: list[tuple[int, str]] = [(m.start(), m.group(1)) for m in _FENCE.finditer(text)]
    starts += [(m.start(), text[m.start() :]) for m in _OBJECT_START.finditer(text)]
    for pos, chunk in starts:
        try:
            value = json.loads(chunk)
        except ValueError:
            try:
                value = json_repair.loads(chunk)
            except Exception:  # noqa: BLE001 - a repair failure is just "not this candidate"
                continue
        obj = _known_dict(value)
        if obj is not None:
            return obj, pos
    return None, -1


def _clean_reasoning(text: str) -> str | None:
    text = re.sub(r"```[a-zA-Z]*\s*$", "", text.strip()).strip()
    return text or None


def parse_span_json(text: str | None) -> ParsedFeedback:
    """Parse annotator or reward-model output into a :class:`ParsedFeedback`; never raises.

    Accepts reasoning before the JSON, fenced blocks, trailing text, single quotes, trailing commas, truncated
    objects and the alternative keys ``textual_feedback`` / ``Code Feedback`` / ``code_feedback`` (critique),
    ``wrong_code`` (poor spans) and ``improvement_code`` (good spans). Text that is not valid Unicode (lone
    surrogates) is replaced and the result is a ``parse_error`` (:func:`valid_text`).
    """
    return valid_text(_parse_span_json(text))


def _parse_span_json(text: str | None) -> ParsedFeedback:
    if text is None or not str(text).strip():
        return ParsedFeedback(None, status="parse_error", error="empty output", raw=text)
    text = str(text)
    obj, pos = _find_object(text)
    if obj is None:
        return ParsedFeedback(
            None, status="parse_error", error="no JSON object with critique/span keys found", raw=text
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
        _text_or_none(critique),
        good_spans,
        poor_spans,
        reasoning,
        "ok",
        None,
        text,
        missing=missing,
        word_scores=word_scores,
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


# ----------------------------------------------------------------------------------------------------------------
# 2. Locating spans
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlignedSpan:
    """One quoted span placed in the response: half-open char offsets, or None when unmatched."""

    text: str
    label: str  # "positive" | "negative"
    start: int | None
    end: int | None
    match: str  # "exact" | "normalized" | "fuzzy" | "unmatched"
    score: float

    @property
    def matched(self) -> bool:
        return self.start is not None


# Normalised form: NFKD compatibility decomposition, casefold, curly quotes/dashes -> ASCII, and *every*
# whitespace and markdown-emphasis character deleted (so indentation and line breaks never matter). A match found
# in that squeezed text is accepted only if its words equal the span's (_collapse, in _normalized), so deleting
# whitespace never joins words that were apart. Invisible characters (zero-width space / joiners, word joiner,
# byte-order mark, soft hyphen) are deleted from both forms: inside a word they do not split it, so a quote matches
# the word whether either side carries them (a response cannot hide a word from its critic that way).
_QUOTES = {
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb", '"'),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2212", "-"),
}
_MARKDOWN = "*_`"
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
_SPACES = "".join(chr(c) for c in range(0x3001) if chr(c).isspace()) + "\u2028\u2029"
_SQUEEZE = str.maketrans({**_QUOTES, **dict.fromkeys(_SPACES + _MARKDOWN + _INVISIBLE, None)})
_COLLAPSE = str.maketrans({**_QUOTES, **dict.fromkeys(_MARKDOWN + _INVISIBLE, None)})
_DROP_INVISIBLE = str.maketrans(dict.fromkeys(_INVISIBLE, None))
_KEEP = np.ones(0x110000, dtype=bool)  # code point -> kept by squeeze (a lookup table beats np.isin per call)
_KEEP[[ord(c) for c in _SPACES + _MARKDOWN + _INVISIBLE]] = False


def _fold_char(ch: str) -> str:
    return unicodedata.normalize("NFKD", ch).casefold()


def _squeeze_slow(text: str) -> tuple[str, list[int]]:
    """Per-character normalisation with a map back: ``src[i]`` is the original index of normalised char ``i``."""
    chars: list[str] = []
    src: list[int] = []
    for i, ch in enumerate(text):
        for c in _fold_char(ch).translate(_SQUEEZE):
            chars.append(c)
            src.append(i)
    return "".join(chars), src


def squeeze(text: str) -> tuple[str, Sequence[int]]:
    """Normalised ``text`` and the original index of each of its characters.

    Fast path (C string methods + numpy) when folding is one char to one char, i.e. the text is NFKD-stable and
    casefold keeps its length; otherwise the per-character loop of :func:`_squeeze_slow`, which is its definition.
    """
    folded = text.casefold()
    if len(folded) == len(text) and unicodedata.is_normalized("NFKD", text):
        src = np.flatnonzero(_KEEP[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)])
        out = folded.translate(_SQUEEZE)
        if len(out) == len(src):
            return out, src
    return _squeeze_slow(text)


def _fold(text: str) -> str:
    """Per-character NFKD + casefold; one C call when the text is already NFKD (then the two agree)."""
    if text.isascii() or unicodedata.is_normalized("NFKD", text):
        return text.casefold()
    return "".join(_fold_char(ch) for ch in text)


def _squeeze_text(text: str) -> str:
    """The normalised text alone (no index map): for quoted spans."""
    return _fold(text).translate(_SQUEEZE)


def _collapse(text: str) -> str:
    """Words of the normalised text joined by single spaces (markdown removed)."""
    return " ".join(_fold(text).translate(_COLLAPSE).split())


def _with_emphasis(text: str, start: int, end: int, span: str) -> tuple[int, int]:
    """Widen [start, end) over markdown markers glued to its ends (``**Paris**``) where the quote has markers too.

    The squeezed match never includes markers at its edges; a quote ``**Paris**`` should still get the markers,
    a quote ``Paris`` should not, and ``snake_case`` joins are never crossed.
    """
    if span.endswith(tuple(_MARKDOWN)):
        e = end
        while e < len(text) and text[e] in _MARKDOWN:
            e += 1
        if e > end and (e == len(text) or not text[e].isalnum()):
            end = e
    if span.startswith(tuple(_MARKDOWN)):
        b = start
        while b > 0 and text[b - 1] in _MARKDOWN:
            b -= 1
        if b < start and (b == 0 or not text[b - 1].isalnum()):
            start = b
    return start, end


@dataclass
class _Response:
    """A response with its normalised form computed once, on first need."""

    text: str
    _squeezed: tuple[str, Sequence[int]] | None = None

    @property
    def squeezed(self) -> tuple[str, Sequence[int]]:
        if self._squeezed is None:
            self._squeezed = squeeze(self.text)
        return self._squeezed


def _occurrences(haystack: str, needle: str) -> Iterable[int]:
    pos = haystack.find(needle)
    while pos >= 0:
        yield pos
        pos = haystack.find(needle, pos + 1)


def _choose(candidates: list[tuple[int, int]], claimed: set[tuple[int, int]], response: str, context: str | None):
    """Among candidate intervals pick the first unclaimed (or best matching ``context``); None if no candidates."""
    if not candidates:
        return None
    free = [c for c in candidates if c not in claimed] or candidates
    if context and len(free) > 1:
        width = len(context)

        def fit(c: tuple[int, int]) -> float:
            return fuzz.partial_ratio(context, response[max(0, c[0] - width) : c[1] + width])

        return max(free, key=fit)  # max() keeps the first of equal scores: deterministic
    return free[0]


_MAX_CANDIDATES = 64


def _exact(response: str, span: str, claimed, context) -> tuple[int, int] | None:
    cands = []
    for pos in _occurrences(response, span):
        cands.append((pos, pos + len(span)))
        if len(cands) >= _MAX_CANDIDATES or ((pos, pos + len(span)) not in claimed and not context):
            break
    return _choose(cands, claimed, response, context)


def _normalized(resp: _Response, span: str, claimed, context) -> tuple[int, int] | None:
    needle = _squeeze_text(span)
    if not needle:
        return None
    hay, src = resp.squeezed
    words, visible = _collapse(span), span.translate(_DROP_INVISIBLE)
    cands, literal = [], []
    for pos in _occurrences(hay, needle):
        start, end = int(src[pos]), int(src[pos + len(needle) - 1]) + 1
        if _collapse(resp.text[start:end]) != words:
            continue  # e.g. "a b" found inside "about": same letters, different words
        same = resp.text[start:end].translate(_DROP_INVISIBLE) == visible  # same letters and case, hidden marks apart
        start, end = _with_emphasis(resp.text, start, end, span)
        (literal if same else cands).append((start, end))
        if len(cands) + len(literal) >= _MAX_CANDIDATES or (same and (start, end) not in claimed and not context):
            break
    return _choose(literal + cands, claimed, resp.text, context)  # a case-exact occurrence before a folded one


def _word_char(ch: str) -> bool:
    """A letter or digit of a script that separates words with spaces (CJK and kana runs have no word breaks)."""
    return ch.isalnum() and ord(ch) < 0x2E80


def _snap_to_words(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen a fuzzy window that cuts a word in two so it covers whole words."""
    while start > 0 and _word_char(text[start - 1]) and _word_char(text[start]):
        start -= 1
    while end < len(text) and _word_char(text[end - 1]) and _word_char(text[end]):
        end += 1
    return start, end


def _fuzzy(resp: _Response, span: str, threshold: float, min_chars: int) -> tuple[tuple[int, int] | None, float]:
    """Best partial alignment of the normalised span in the normalised response, scored on the *whole* span.

    ``partial_ratio`` of a span longer than the response scores the response inside the span; rescoring the full
    span against the window found (``ratio``) keeps a long quote from matching a short response it merely contains.
    """
    needle = _squeeze_text(span)
    hay, src = resp.squeezed
    if len(needle) < min_chars or not hay:
        return None, 0.0
    res = fuzz.partial_ratio_alignment(needle, hay, score_cutoff=threshold)
    if res is None or res.dest_end <= res.dest_start:
        return None, 0.0
    score = fuzz.ratio(needle, hay[res.dest_start : res.dest_end])
    if score < threshold:
        return None, 0.0
    start, end = int(src[res.dest_start]), int(src[res.dest_end - 1]) + 1
    return _with_emphasis(resp.text, *_snap_to_words(resp.text, start, end), span), float(score)


def locate_span(
    response: str | _Response,
    span: str,
    label: str,
    *,
    context: str | None = None,
    claimed: set[tuple[int, int]] | None = None,
    fuzzy_threshold: float = 85.0,
    min_fuzzy_chars: int = 8,
) -> AlignedSpan:
    """Place one span (see :func:`locate_spans`); adds the chosen interval to ``claimed``."""
    resp = response if isinstance(response, _Response) else _Response(response)
    claimed = set() if claimed is None else claimed
    needle = span.strip()
    if not needle:
        return AlignedSpan(span, label, None, None, "unmatched", 0.0)
    match, score = "exact", 100.0
    found = _exact(resp.text, needle, claimed, context)
    if found is None:
        match, found = "normalized", _normalized(resp, needle, claimed, context)
    if found is None:
        match, (found, score) = "fuzzy", _fuzzy(resp, needle, fuzzy_threshold, min_fuzzy_chars)
    if found is None:
        return AlignedSpan(span, label, None, None, "unmatched", 0.0)
    claimed.add(found)
    return AlignedSpan(span, label, found[0], found[1], match, score)


def locate_spans(
    response: str,
    spans: Sequence[str],
    label: str,
    *,
    context: str | None = None,
    claimed: set[tuple[int, int]] | None = None,
    fuzzy_threshold: float = 85.0,
    min_fuzzy_chars: int = 8,
) -> list[AlignedSpan]:
    """Place each span in ``response``; one :class:`AlignedSpan` per input span, in input order.

    ``claimed`` (shared across calls for one response) holds intervals already taken, so a phrase quoted twice
    lands on its first and second occurrence. ``context`` (e.g. the critique) breaks ties between occurrences.
    """
    resp = _Response(response)
    claimed = set() if claimed is None else claimed
    kw = {
        "context": context,
        "claimed": claimed,
        "fuzzy_threshold": fuzzy_threshold,
        "min_fuzzy_chars": min_fuzzy_chars,
    }
    return [locate_span(resp, s, label, **kw) for s in spans]


def locate_words(response: str, word_scores: Sequence[tuple[str, float]]) -> list[AlignedSpan]:
    """Word-level labels placed in order: each word is found (exactly) after the previous one; score 0 is neutral.

    A word that is not found is ``unmatched`` and does not move the cursor, so one bad word does not shift the rest.
    """
    out, cursor = [], 0
    for word, score in word_scores:
        label = POSITIVE if score > 0 else NEGATIVE if score < 0 else "neutral"
        pos = response.find(word, cursor) if word.strip() else -1
        if pos < 0:
            out.append(AlignedSpan(word, label, None, None, "unmatched", 0.0))
            continue
        cursor = pos + len(word)
        out.append(AlignedSpan(word, label, pos, cursor, "exact", 100.0))
    return out


def align_feedback(
    response: str,
    parsed_or_good_poor: ParsedFeedback | tuple[Sequence[str], Sequence[str]],
    cfg: AlignConfig | None = None,
    *,
    use_context: bool = False,
) -> list[AlignedSpan]:
    """Good spans then poor spans of one item, placed in ``response`` with one shared set of claimed intervals.

    Feedback that carries ``located`` offsets (a token tagger's) is placed exactly there, without searching.
    """
    if isinstance(parsed_or_good_poor, ParsedFeedback) and parsed_or_good_poor.located:
        return [AlignedSpan(response[s:e], label, s, e, "exact", 100.0) for s, e, label in parsed_or_good_poor.located]
    if isinstance(parsed_or_good_poor, ParsedFeedback):
        good, poor = parsed_or_good_poor.good_spans, parsed_or_good_poor.poor_spans
        context = parsed_or_good_poor.critique if use_context else None
    else:
        (good, poor), context = parsed_or_good_poor, None
    threshold = cfg.fuzzy_threshold if cfg is not None else 85.0
    min_chars = cfg.min_fuzzy_chars if cfg is not None else 8
    claimed: set[tuple[int, int]] = set()
    kw = {"context": context, "claimed": claimed, "fuzzy_threshold": threshold, "min_fuzzy_chars": min_chars}
    return locate_spans(response, good, POSITIVE, **kw) + locate_spans(response, poor, NEGATIVE, **kw)


# ----------------------------------------------------------------------------------------------------------------
# 3. Token labels
# ----------------------------------------------------------------------------------------------------------------


def label_values(cfg: AlignConfig | None = None) -> dict[str, float]:
    """The label values of ``cfg`` (defaults +1 / -1 / 0)."""
    if cfg is None:
        return dict(DEFAULT_VALUES)
    return {POSITIVE: cfg.positive_value, NEGATIVE: cfg.negative_value, "neutral": cfg.neutral_value}


def _resolve_values(
    values: Mapping[str, float] | AlignConfig | None, overlap: str | None
) -> tuple[dict[str, float], str]:
    if values is not None and not isinstance(values, Mapping):  # an AlignConfig
        overlap = overlap or values.overlap
        values = label_values(values)
    unknown = set(values or {}) - set(DEFAULT_VALUES)
    if unknown:
        raise ValueError(f"unknown label value key(s) {sorted(unknown)}; expected positive, negative, neutral")
    overlap = overlap or "poor_wins"
    if overlap not in ("poor_wins", "good_wins"):
        raise ValueError(f"overlap must be 'poor_wins' or 'good_wins', got {overlap!r}")
    return {**DEFAULT_VALUES, **(values or {})}, overlap


def _is_sorted(xs: Sequence[int]) -> bool:
    return list(xs) == sorted(xs)


def _token_range(starts: Sequence[int], ends: Sequence[int], start: int, end: int, sorted_: bool) -> Iterable[int]:
    """Indices of tokens overlapping [start, end): bisect when offsets are sorted, else a scan."""
    if sorted_:
        lo, hi = bisect_right(ends, start), bisect_left(starts, end)
        return range(lo, max(lo, hi))
    return (i for i in range(len(starts)) if starts[i] < end and start < ends[i])


def labels_for_offsets(
    offsets: Sequence[tuple[int, int]],
    aligned_spans: Iterable[AlignedSpan],
    values: Mapping[str, float] | AlignConfig | None = None,
    *,
    overlap: str | None = None,
    base: int = 0,
) -> list[float]:
    """One label per token offset: the span label when the token's interval overlaps a matched span.

    Zero-width tokens (special tokens, ``(0, 0)``) are never labelled. ``values`` maps "positive" / "negative" /
    "neutral" to label values (defaults +1 / -1 / 0) or is an :class:`AlignConfig` (its values and overlap rule).
    ``overlap`` is "poor_wins" (default) or "good_wins". ``base`` is where the response starts in the text the
    offsets index (e.g. after a chat-templated prompt): span offsets are shifted by it, so prompt tokens never
    overlap a span.
    """
    vals, overlap = _resolve_values(values, overlap)
    labels = [vals["neutral"]] * len(offsets)
    if not offsets:
        return labels
    starts, ends = (list(x) for x in zip(*offsets, strict=True))
    sorted_ = _is_sorted(starts) and _is_sorted(ends)
    winner = NEGATIVE if overlap == "poor_wins" else POSITIVE
    spans = sorted((s for s in aligned_spans if s.start is not None), key=lambda s: s.label == winner)
    for span in spans:  # the winning label is written last
        value = vals[span.label]
        for i in _token_range(starts, ends, span.start + base, span.end + base, sorted_):
            if starts[i] < ends[i]:
                labels[i] = value
    return labels


def token_labels(
    response: str,
    aligned_spans: Iterable[AlignedSpan],
    tokenizer: Any,
    values: Mapping[str, float] | AlignConfig | None = None,
    *,
    overlap: str | None = None,
) -> list[float]:
    """One label per token of ``tokenizer(response, add_special_tokens=False)`` (a fast tokenizer); see
    :func:`labels_for_offsets` for ``values`` and ``overlap``."""
    enc = tokenizer(response, add_special_tokens=False, return_offsets_mapping=True)
    return labels_for_offsets(enc["offset_mapping"], aligned_spans, values, overlap=overlap)


def token_labels_batch(
    responses: Sequence[str],
    aligned: Sequence[Iterable[AlignedSpan]],
    tokenizer: Any,
    values: Mapping[str, float] | AlignConfig | None = None,
    *,
    overlap: str | None = None,
) -> list[list[float]]:
    """:func:`token_labels` for many responses with one batched tokenizer call."""
    enc = tokenizer(list(responses), add_special_tokens=False, return_offsets_mapping=True)
    return [
        labels_for_offsets(offs, spans, values, overlap=overlap)
        for offs, spans in zip(enc["offset_mapping"], aligned, strict=True)
    ]


def decode_with_offsets(
    token_ids: Sequence[int], tokenizer: Any, *, skip_special_tokens: bool = False, window: int = 8
) -> tuple[str, list[tuple[int, int]]]:
    """``tokenizer.decode(token_ids)`` and the char interval of each id in it, by incremental decoding (no re-encoding).

    Token k ends where ``decode(ids[:k+1])`` stops agreeing with the full text. That is computed in a sliding
    window, as streaming detokenizers do: the text token k adds is ``decode(ids[p:k+1])`` minus ``decode(ids[p:k])``
    for a context start ``p`` a few tokens back (context effects such as a stripped leading space or a first
    ``##`` piece appear in both and cancel), so the cost is linear in the length. If the windowed ends do not add up
    to the full text (a decoder with long-range effects) it falls back to decoding every prefix (quadratic, exact).

    A byte-level token that ends inside a multi-byte character (it decodes to a trailing U+FFFD) is extended to the
    end of that character, and the tokens that continue it cover the whole character, as in the fast tokenizers'
    own offset mapping. Tokens that decode to nothing (skipped special tokens) get a zero-width interval.
    """
    ids = [int(i) for i in token_ids]
    kw = {"skip_special_tokens": skip_special_tokens, "clean_up_tokenization_spaces": False}
    text = tokenizer.decode(ids, **kw)
    if not ids:
        return text, []
    ends = _close_tail(_windowed_ends(ids, tokenizer, kw, window), text)
    if ends is None or ends[-1][0] != len(text):
        ends = _close_tail(_prefix_ends(ids, tokenizer, kw, text), text)
    return text, _offsets_from_ends(ends)


def _close_tail(ends: list[tuple[int, bool]] | None, text: str) -> list[tuple[int, bool]] | None:
    """Ids cut inside a character decode to a final U+FFFD: the last token (and those pending with it) end there."""
    if ends and ends[-1][1] and not text[ends[-1][0] :].strip("\ufffd"):
        ends[-1] = (len(text), False)
    return ends


def _offsets_from_ends(ends: Sequence[tuple[int, bool]]) -> list[tuple[int, int]]:
    """(end, incomplete) per token -> (start, end); tokens inside an unfinished character wait for its end."""
    offsets: list[tuple[int, int]] = []
    pending: list[int] = []  # tokens waiting for the rest of their character
    prev = 0
    for k, (end, incomplete) in enumerate(ends):
        if end > prev:
            for j in pending:
                offsets[j] = (min(offsets[j][0], prev), end)
            pending = []
        offsets.append((prev, end))
        if incomplete:
            pending.append(k)
        prev = end
    return offsets


def _windowed_ends(ids: list[int], tokenizer: Any, kw: dict[str, Any], window: int) -> list[tuple[int, bool]] | None:
    """Char end of each token from sliding-window decodes; None when the window deltas are inconsistent."""
    pieces = tokenizer.batch_decode([[i] for i in ids], **kw)
    starts = []
    for k in range(len(ids)):
        p = max(0, k - window)
        while p > 0 and pieces[p].startswith("\ufffd"):  # never start a window inside a multi-byte character
            p -= 1
        starts.append(p)
    before = tokenizer.batch_decode([ids[p:k] for k, p in enumerate(starts)], **kw)
    after = tokenizer.batch_decode([ids[p : k + 1] for k, p in enumerate(starts)], **kw)
    ends: list[tuple[int, bool]] = []
    end = 0
    for a, b in zip(before, after, strict=True):
        a_stem, b_stem = a.rstrip("\ufffd"), b.rstrip("\ufffd")
        if not b_stem.startswith(a_stem):
            return None
        end += len(b_stem) - len(a_stem)
        ends.append((end, len(b_stem) < len(b)))
    return ends


def _prefix_ends(ids: list[int], tokenizer: Any, kw: dict[str, Any], text: str) -> list[tuple[int, bool]]:
    """Char end of each token from decoding every prefix (quadratic; exact for any decoder)."""
    ends: list[tuple[int, bool]] = []
    prev = 0
    for prefix in tokenizer.batch_decode([ids[: k + 1] for k in range(len(ids))], **kw):
        prev, incomplete = _agreed_length(text, prefix, prev)
        ends.append((prev, incomplete))
    return ends


def _agreed_length(text: str, prefix: str, floor: int) -> tuple[int, bool]:
    """How many leading chars of ``prefix`` agree with ``text`` (never below ``floor``), and whether it is incomplete.

    A trailing U+FFFD is read as an unfinished multi-byte character (as in :func:`_windowed_ends`).
    """
    stem = prefix.rstrip("\ufffd")
    incomplete = len(stem) < len(prefix)
    if text.startswith(stem):
        return max(floor, len(stem)), incomplete
    n = floor  # decoders that rewrite earlier text (rare): longest common prefix from the last agreed point
    limit = min(len(text), len(stem))
    while n < limit and text[n] == stem[n]:
        n += 1
    return n, incomplete


def token_offsets_from_ids(
    token_ids: Sequence[int], tokenizer: Any, *, skip_special_tokens: bool = False
) -> list[tuple[int, int]]:
    """Char offsets of the given ids in ``tokenizer.decode(token_ids, clean_up_tokenization_spaces=False)``."""
    return decode_with_offsets(token_ids, tokenizer, skip_special_tokens=skip_special_tokens)[1]


# ----------------------------------------------------------------------------------------------------------------
# 4. The align stage on frames
# ----------------------------------------------------------------------------------------------------------------


def _select_annotations(annotations_df: Any, cfg: AlignConfig, file: str) -> Any:
    from t2g_core.schemas import SchemaError

    df = annotations_df
    if cfg.annotator is not None:
        df = df[df["annotator"] == cfg.annotator]
        if df.empty:
            raise SchemaError(file, f"no rows from annotator {cfg.annotator!r}", column="annotator")
    dup = df["id"].duplicated()
    if dup.any():
        row = int(dup.to_numpy().nonzero()[0][0])
        raise SchemaError(
            file,
            f"item {df['id'].iloc[row]!r} has several annotators ({', '.join(sorted(set(df['annotator'])))}); "
            "set align.annotator to choose one",
            column="id",
            row=row,
        )
    return df.reset_index(drop=True)


def align_frame(
    feedback_df: Any, annotations_df: Any, cfg: AlignConfig | None = None, *, annotations_file: str = "annotations"
) -> Any:
    """The ``spans`` artifact: one row per quoted span (good spans first, then poor) of every ``ok`` annotation.

    Unmatched spans are rows with ``match="unmatched"`` and null offsets. Annotations whose status is not ``ok``
    contribute no spans (their failure is already recorded in the annotations artifact). Raises SchemaError naming
    the row when an annotation refers to an item missing from the feedback or an item is annotated twice.
    """
    import pandas as pd

    from t2g_core.config.align import AlignConfig
    from t2g_core.schemas import SPANS, SchemaError

    cfg = cfg or AlignConfig()
    ann = _select_annotations(annotations_df, cfg, annotations_file)
    responses = dict(zip(feedback_df["id"], feedback_df["response"], strict=True))
    rows: list[dict[str, Any]] = []
    for i, rec in enumerate(ann.itertuples(index=False)):
        if rec.id not in responses:
            raise SchemaError(annotations_file, f"item {rec.id!r} is not in the feedback", column="id", row=i)
        if rec.status != "ok":
            continue
        parsed = ParsedFeedback(rec.critique, list(rec.good_spans), list(rec.poor_spans))
        aligned = align_feedback(responses[rec.id], parsed, cfg, use_context=cfg.use_critique_context)
        rows += [
            {
                "id": rec.id,
                "span_index": k,
                "label": a.label,
                "text": a.text,
                "start": a.start,
                "end": a.end,
                "match": a.match,
                "score": a.score,
            }
            for k, a in enumerate(aligned)
        ]
    df = pd.DataFrame(rows, columns=SPANS.names)
    return df.astype({"start": "Int64", "end": "Int64", "span_index": "int64", "score": "float64"})


def spans_by_item(spans_df: Any) -> dict[str, list[AlignedSpan]]:
    """Rebuild :class:`AlignedSpan` lists per item id from a ``spans`` frame (in ``span_index`` order)."""
    out: dict[str, list[AlignedSpan]] = {}
    for rec in spans_df.sort_values(["id", "span_index"]).itertuples(index=False):
        start = None if _is_na(rec.start) else int(rec.start)
        end = None if _is_na(rec.end) else int(rec.end)
        out.setdefault(rec.id, []).append(AlignedSpan(rec.text, rec.label, start, end, rec.match, float(rec.score)))
    return out


def _is_na(value: Any) -> bool:
    import pandas as pd

    return bool(pd.isna(value))
