"""Critique spans: parse the span JSON, locate quoted spans in the response, label tokens.

One module per step below: ``parsing``, ``locate``, ``labels``, ``frames``; the names here are the public ones.

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
