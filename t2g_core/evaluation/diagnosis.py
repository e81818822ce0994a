"""What a trained policy still gets wrong, and how far a reward model's verdicts drift from a reference critic's.

- :func:`fact_error_profile`: on demo summaries, per slot and in total, the share of responses whose value is
  ``correct``, ``invented``, ``swapped`` or ``missing``, and the mean number of repeated clauses.
- :func:`poor_span_agreement`: a reward model's poor spans against a reference critic's: span P/R/F1 (IoU >= 0.5)
  and character F1, micro-averaged. A critique that failed counts as no spans.
"""

from __future__ import annotations

from collections.abc import Sequence

from t2g_core.alignment import micro_prf, span_prf
from t2g_core.config.align import AlignConfig
from t2g_core.demo.summarization import summary_errors
from t2g_core.spans import NEGATIVE, ParsedFeedback, align_feedback

VERDICTS = ("correct", "invented", "swapped", "missing")


def fact_verdicts(response: str, facts: dict[str, str]) -> tuple[dict[str, str], int]:
    """Per slot ``correct`` / ``invented`` / ``swapped`` / ``missing``, and the number of repeated clauses."""
    score = summary_errors(response, facts)
    values = {v.strip().casefold() for v in facts.values()}
    out = {}
    for slot, verdict in score.slots.items():
        if verdict == "wrong":
            claim = (score.claims[slot] or "").strip().casefold()
            verdict = "swapped" if claim in values else "invented"
        out[slot] = verdict
    return out, score.n_redundant


def fact_error_profile(items: Sequence[tuple[dict[str, str], str]]) -> dict:
    """``items`` are (facts, response) pairs. Returns ``n``, ``slots`` (slot -> verdict -> share of responses),
    ``total`` (verdict -> share of all slots) and ``redundant_mean`` (repeated clauses per response)."""
    if not items:
        raise ValueError("fact_error_profile needs at least one response")
    counts: dict[str, dict[str, int]] = {}
    redundant = 0
    for facts, response in items:
        verdicts, repeats = fact_verdicts(response, facts)
        redundant += repeats
        for slot, verdict in verdicts.items():
            counts.setdefault(slot, dict.fromkeys(VERDICTS, 0))[verdict] += 1
    n = len(items)
    slots = {slot: {v: c / n for v, c in by.items()} for slot, by in counts.items()}
    n_slots = sum(sum(by.values()) for by in counts.values())
    total = {v: sum(by[v] for by in counts.values()) / n_slots for v in VERDICTS}
    return {"n": n, "slots": slots, "total": total, "redundant_mean": redundant / n}


def _poor(response: str, feedback: ParsedFeedback, align_cfg: AlignConfig | None) -> list[tuple[int, int, str]]:
    if not feedback.ok:
        return []
    spans = align_feedback(response, feedback, align_cfg)
    return [(s.start, s.end, s.label) for s in spans if s.label == NEGATIVE and s.start is not None]


def poor_span_agreement(
    responses: Sequence[str],
    predicted: Sequence[ParsedFeedback],
    reference: Sequence[ParsedFeedback],
    align_cfg: AlignConfig | None = None,
) -> dict[str, float]:
    """Span and character P/R/F1 of ``predicted``'s poor spans against ``reference``'s, micro over responses, with
    the number of poor spans each found."""
    if not len(responses) == len(predicted) == len(reference):
        raise ValueError(f"{len(responses)} responses, {len(predicted)} predictions, {len(reference)} references")
    spans, chars = [], [0, 0, 0]  # chars: hits, predicted, reference
    for text, pred, ref in zip(responses, predicted, reference, strict=True):
        p, r = _poor(text, pred, align_cfg), _poor(text, ref, align_cfg)
        spans.append(span_prf(p, r))
        pc = {c for s, e, _ in p for c in range(s, e)}
        rc = {c for s, e, _ in r for c in range(s, e)}
        chars = [chars[0] + len(pc & rc), chars[1] + len(pc), chars[2] + len(rc)]
    agg = micro_prf(spans)
    char = micro_prf([{"tp": chars[0], "n_pred": chars[1], "n_gold": chars[2]}])
    return {
        "n": len(responses),
        "reference_spans": agg["n_gold"],  # the support: few spans make a noisy F1
        "predicted_spans": agg["n_pred"],
        "span_precision": agg["precision"],
        "span_recall": agg["recall"],
        "span_f1": agg["f1"],
        "char_precision": char["precision"],
        "char_recall": char["recall"],
        "char_f1": char["f1"],
    }
