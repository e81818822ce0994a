"""Token labels from located spans, and the offsets of given token ids in their decoded text (the package's step 3)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from t2g_core.spans.locate import AlignedSpan
from t2g_core.spans.parsing import DEFAULT_VALUES, NEGATIVE, POSITIVE

if TYPE_CHECKING:
    from t2g_core.config.align import AlignConfig


def label_values(cfg: AlignConfig | None = None) -> dict[str, float]:
    """The label values of ``cfg`` (defaults +1 / -1 / 0)."""
    if cfg is None:
        return dict(DEFAULT_VALUES)
    return {POSITIVE: cfg.positive_value, NEGATIVE: cfg.negative_value, "neutral": 0.0}


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


def tokens_in(offsets: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    """The indices of the non-empty tokens of ``offsets`` that overlap the char interval [start, end)."""
    return [i for i, (s, e) in enumerate(offsets) if s < e and s < end and start < e]


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

    Zero-width tokens are never labelled. ``values`` maps "positive" / "negative" / "neutral" to label values
    (default +1 / -1 / 0) or is an :class:`AlignConfig`; ``overlap`` is "poor_wins" (default) or "good_wins".
    ``base`` is where the response starts in the text the offsets index (after a chat-templated prompt), so prompt
    tokens never overlap."""
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


def anchor_token(offsets: Sequence[tuple[int, int]], at: int | None) -> int:
    """Index of the token holding char ``at`` or, in a gap, the first token after it; the last token when ``at`` is
    None or past every token (where omitted content is anchored: it belonged before that token)."""
    last = max(len(offsets) - 1, 0)
    if at is None:
        return last
    return next((k for k, (start, end) in enumerate(offsets) if end > at and end > start), last)


def decode_with_offsets(
    token_ids: Sequence[int], tokenizer: Any, *, skip_special_tokens: bool = False, window: int = 8
) -> tuple[str, list[tuple[int, int]]]:
    """``tokenizer.decode(token_ids)`` and the char interval of each id in it, by incremental decoding (no re-encoding).

    Token k adds ``decode(ids[p:k+1])`` minus ``decode(ids[p:k])`` for a context start ``p`` a few tokens back, as
    streaming detokenizers do (context effects cancel), so the cost is linear; if the ends do not add up to the full
    text it falls back to decoding every prefix (quadratic, exact). A byte-level token ending inside a multi-byte
    character is extended to its end, as in the fast tokenizers' offsets; tokens that decode to nothing get zero
    width."""
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
