"""Locating quoted spans in a response as exact character offsets (the package's step 2)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
from rapidfuzz import fuzz

from t2g_core.spans.parsing import NEGATIVE, POSITIVE, ParsedFeedback

if TYPE_CHECKING:
    from t2g_core.config.align import AlignConfig


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
    """Normalised ``text`` and the original index of each of its characters: C string methods and numpy when folding
    is one char to one char, else :func:`_squeeze_slow`, which is its definition."""
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
    """Widen [start, end) over markdown markers glued to its ends (``**Paris**``) where the quote has markers too;
    ``snake_case`` joins are never crossed."""
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

    @cached_property
    def squeezed(self) -> tuple[str, Sequence[int]]:
        return squeeze(self.text)


def _occurrences(haystack: str, needle: str) -> Iterable[int]:
    pos = -1
    while (pos := haystack.find(needle, pos + 1)) >= 0:
        yield pos


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
    """Best partial alignment of the normalised span in the normalised response, rescored on the *whole* span, so a
    long quote does not match a short response it merely contains."""
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
    """Place each span in ``response``; one :class:`AlignedSpan` per span, in order. ``claimed`` (shared across calls
    for one response) makes a phrase quoted twice land on two occurrences; ``context`` breaks ties between them."""
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


def exact_spans(response: str, located: Iterable[Sequence]) -> list[AlignedSpan]:
    """Spans of known offsets (``(start, end, label, ...)``: a tagger's, a target's, the truth) as exact matches."""
    return [AlignedSpan(response[s:e], label, s, e, "exact", 100.0) for s, e, label, *_ in located]


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
        return exact_spans(response, parsed_or_good_poor.located)
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
