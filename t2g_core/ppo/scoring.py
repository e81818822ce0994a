"""Score rollouts with a reward source (anything with ``critique_batch(rows) -> list[ParsedFeedback]``) and turn
critiques into span labels on the *sampled* policy tokens, never re-encoded (docs/ppo.md, "From critiques to labels
on the sampled tokens").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from t2g_core.config.align import AlignConfig
from t2g_core.spans import (
    NEGATIVE,
    POSITIVE,
    AlignedSpan,
    ParsedFeedback,
    align_feedback,
    anchor_token,
    decode_with_offsets,
    label_values,
    labels_for_offsets,
    locate_words,
    tokens_in,
)


class RewardSource(Protocol):
    def critique_batch(self, rows: list[dict]) -> list[ParsedFeedback]: ...


class CriticSource:
    """Adapts a per-row critic (``critique(row) -> ParsedFeedback``) to a reward source; errors become failed rows."""

    def __init__(self, critic):
        self.critic = critic

    def critique_batch(self, rows: list[dict]) -> list[ParsedFeedback]:
        out = []
        for row in rows:
            try:
                out.append(self.critic.critique(row))
            except Exception as exc:  # a critic crash must not kill the PPO step; the row is counted as failed
                out.append(ParsedFeedback(critique=None, status="parse_error", error=f"{type(exc).__name__}: {exc}"))
        return out


@dataclass(frozen=True)
class ScoredResponse:
    text: str  # the decoded response (without EOS), what the critic saw
    offsets: list[tuple[int, int]]  # char interval of each sampled id (EOS included, zero-width)
    labels: list[float]  # delta_t per sampled id (EOS included, 0)
    feedback: ParsedFeedback
    n_spans: int
    n_unmatched: int
    missing_tokens: list[int] = field(default_factory=list)  # sampled-id index where each missing item belonged
    unanchored: int = 0  # how many of them the critic gave no place (anchored on the last token)


def decode_responses(
    response_ids: Sequence[Sequence[int]], tokenizer, eos_token_id: int
) -> list[tuple[str, list[tuple[int, int]]]]:
    """Text and per-id offsets of each response; ids are the valid sampled ids (EOS, if present, last)."""
    out = []
    for ids in response_ids:
        ids = [int(i) for i in ids]
        body = ids[:-1] if ids and ids[-1] == eos_token_id else ids
        text, offsets = decode_with_offsets(body, tokenizer)
        offsets = offsets + [(len(text), len(text))] * (len(ids) - len(body))
        out.append((text, offsets))
    return out


def distinct_good_spans(aligned: list[AlignedSpan]) -> list[AlignedSpan]:
    """The spans, less every good span whose text (case- and space-folded) an earlier good span already has."""
    seen: set[str] = set()
    out = []
    for span in sorted(aligned, key=lambda s: (s.start is None, s.start or 0)):
        if span.label == POSITIVE and span.start is not None:
            key = " ".join(span.text.casefold().split())
            if key in seen:
                continue
            seen.add(key)
        out.append(span)
    return out


def share_spans(
    offsets: Sequence[tuple[int, int]], aligned: list[AlignedSpan], labels: list[float], kind: str, value: float
) -> list[float]:  # (T,) -> (T,)
    """The tokens of each ``kind`` span still labelled ``value`` (a poor span overrules a good one) share its label."""
    out = list(labels)
    for span in aligned:
        if span.label != kind or span.start is None:
            continue
        tokens = [i for i in tokens_in(offsets, span.start, span.end) if labels[i] == value]
        for i in tokens:
            out[i] = value / len(tokens)
    return out


def missing_tokens(offsets: Sequence[tuple[int, int]], fb: ParsedFeedback) -> list[int]:
    at = list(fb.missing_at) + [None] * (len(fb.missing) - len(fb.missing_at))
    return [anchor_token(offsets, a) for a in at[: len(fb.missing)]]


def span_labels(
    text: str, offsets: Sequence[tuple[int, int]], fb: ParsedFeedback, cfg: AlignConfig
) -> tuple[list[float], list[AlignedSpan]]:  # -> (T,) labels, the spans placed
    """A critique's quoted spans on the sampled tokens, with the PPO rules of ``cfg``: a repeated good span earns
    nothing (``repeated_good_spans``), and a span's tokens share its label (``span_reward``)."""
    values = label_values(cfg)
    aligned = [s for s in align_feedback(text, fb, cfg) if s.label != "neutral"]
    if cfg.repeated_good_spans == "once":
        aligned = distinct_good_spans(aligned)  # repeating what was right must not pay (a reward-model hack)
    labels = labels_for_offsets(offsets, aligned, values, overlap=cfg.overlap)
    if cfg.span_reward != "per_token":
        labels = share_spans(offsets, aligned, labels, POSITIVE, values[POSITIVE])  # length must not pay either
    if cfg.span_reward == "per_span":
        labels = share_spans(offsets, aligned, labels, NEGATIVE, values[NEGATIVE])  # nor cost more than it pays
    for (start, end, _), weight in zip(fb.located, fb.located_weights, strict=False):  # a disputed label counts less
        for i in tokens_in(offsets, start, end):
            labels[i] *= min(1.0, max(0.0, weight))
    return labels, aligned


def label_responses(
    decoded: list[tuple[str, list[tuple[int, int]]]],
    feedback: list[ParsedFeedback],
    align_cfg: AlignConfig | None,
    *,
    words: bool = False,
) -> list[ScoredResponse]:
    """Align each critique's quoted spans (or, with ``words``, its word labels) to its response and label every
    sampled token. Raises ValueError when ``words`` is asked of a critique without word labels."""
    cfg = align_cfg if align_cfg is not None else AlignConfig()
    scored = []
    for (text, offsets), fb in zip(decoded, feedback, strict=True):
        if not fb.ok:
            scored.append(ScoredResponse(text, offsets, [0.0] * len(offsets), fb, 0, 0))
            continue
        if words and fb.word_scores is None:
            raise ValueError(
                "reward_mode=dense needs word-level labels (ParsedFeedback.word_scores, a reward model's "
                "word_score_list); this reward source only quotes spans"
            )
        if words:
            aligned = [s for s in locate_words(text, fb.word_scores) if s.label != "neutral"]
            labels = labels_for_offsets(offsets, aligned, label_values(cfg), overlap=cfg.overlap)
        else:
            labels, aligned = span_labels(text, offsets, fb, cfg)
        unmatched = sum(1 for s in aligned if s.start is None)
        anchors = missing_tokens(offsets, fb)
        unanchored = len(fb.missing) - sum(a is not None for a in fb.missing_at[: len(fb.missing)])
        scored.append(ScoredResponse(text, offsets, labels, fb, len(aligned), unmatched, anchors, unanchored))
    return scored
