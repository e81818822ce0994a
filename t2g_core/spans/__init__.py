"""Critique spans: parse the span JSON, locate quoted spans in the response, label tokens.

One module per step (``parsing``, ``locate``, ``labels``, ``frames``); the names here are the public ones. The steps
and how they differ from the reference code: docs/pipeline.md, "Span alignment".
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
    tokens_in,
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
    "tokens_in",
    "valid_text",
]
