"""Critique spans: parse the span JSON, locate quoted spans in the response, label tokens.

One module per step (``parsing``, ``locate``, ``labels``, ``frames``); the names here are the public ones.

1. :func:`parse_span_json`: annotator / reward-model text -> :class:`ParsedFeedback`; a failure is a
   ``parse_error`` value, never an exception.
2. :func:`locate_spans`: each quote -> half-open char offsets in the response: exact ``str.find``, then a normalised
   match (case, whitespace, curly quotes, NFKD, markdown, indentation) mapped back exactly, then a rapidfuzz partial
   alignment above a threshold; an unplaced span is ``unmatched``, never dropped. A repeated phrase takes its first
   unclaimed occurrence (or, given ``context``, the best-matching one).
3. :func:`token_labels` / :func:`labels_for_offsets`: one label per token whose offset interval overlaps a span
   (poor wins unless ``overlap="good_wins"``); :func:`token_offsets_from_ids` / :func:`decode_with_offsets` give
   the offsets of *given* ids (PPO's samples) by incremental decoding, never re-encoding.
4. :func:`align_frame`: the align stage on frames; :func:`spans_by_item` reads its rows back.

Unlike the reference code (``microsoft/Text2Grad``): no whitespace-split words, no per-token decoding and lowercase
word matching, no greedy monotonic word walk, and unmatched spans are kept.
"""

from t2g_core.spans.frames import align_frame, spans_by_item
from t2g_core.spans.labels import (
    anchor_token,
    decode_with_offsets,
    label_values,
    labels_for_offsets,
    token_labels,
    token_labels_batch,
    token_offsets_from_ids,
)
from t2g_core.spans.locate import AlignedSpan, align_feedback, locate_span, locate_spans, locate_words, squeeze
from t2g_core.spans.parsing import DEFAULT_VALUES, NEGATIVE, POSITIVE, ParsedFeedback, parse_span_json, valid_text

__all__ = [
    "DEFAULT_VALUES",
    "NEGATIVE",
    "POSITIVE",
    "AlignedSpan",
    "ParsedFeedback",
    "align_feedback",
    "align_frame",
    "anchor_token",
    "decode_with_offsets",
    "label_values",
    "labels_for_offsets",
    "locate_span",
    "locate_spans",
    "locate_words",
    "parse_span_json",
    "spans_by_item",
    "squeeze",
    "token_labels",
    "token_labels_batch",
    "token_offsets_from_ids",
    "valid_text",
]
