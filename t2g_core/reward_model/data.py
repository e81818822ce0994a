"""Reward-model training data: ``rm_data`` rows (id, split, rm_prompt, rm_target) from feedback + annotations; what
each kind's rows hold, and which annotation and spans are used: docs/reward_model.md, "Training data".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from t2g_core.policy_prompts import render_policy_prompt
from t2g_core.reward_model.prompts import TRUNCATION_MARK, build_rm_target, count_tokens, render_rm_prompt
from t2g_core.spans import ParsedFeedback, align_feedback, parse_span_json


def split_for_id(item_id: str, val_fraction: float) -> str:
    """``"validation"`` for a deterministic ``val_fraction`` of ids (by SHA-256 of the id), else ``"train"``."""
    h = int(hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:12], 16) / float(16**12)
    return "validation" if h < val_fraction else "train"


@dataclass
class RMDataStats:
    n_items: int = 0
    n_rows: int = 0
    n_train: int = 0
    n_validation: int = 0
    n_no_ok_annotation: int = 0
    n_target_too_long: int = 0
    n_prompt_truncated: int = 0
    n_spans_kept: int = 0
    n_spans_unmatched: int = 0
    n_spans_truncated: int = 0
    n_missing: int = 0
    skipped_ids: list[str] = field(default_factory=list)

    def as_metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.__dict__.items() if isinstance(v, int)}


@dataclass(frozen=True)
class GoldSpan:
    """An annotated span located in the response: half-open character offsets."""

    text: str
    label: str  # "positive" | "negative"
    start: int
    end: int


def locate_gold_spans(response: str, good: list[str], poor: list[str], *, spans_df=None, item_id=None, align_cfg=None):
    """Annotated spans located in ``response`` (exact response text + offsets), and the number left unmatched: from
    the ``spans`` artifact when it has the item, else by alignment."""
    if spans_df is not None and item_id is not None and (spans_df["id"] == item_id).any():
        found = list(spans_df[spans_df["id"] == item_id].sort_values("span_index").itertuples(index=False))
    else:
        found = align_feedback(response, (list(good), list(poor)), align_cfg)
    located = [
        GoldSpan(response[int(s.start) : int(s.end)], s.label, int(s.start), int(s.end))
        for s in found
        if s.match != "unmatched" and not pd.isna(s.start) and not pd.isna(s.end)
    ]
    return located, len(found) - len(located)


def _dedupe(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(t for t in texts if t.strip()))


def _generative_row(item, critique, spans: list[GoldSpan], tokenizer, cfg, stats: RMDataStats, missing=()):
    """(RM prompt, critique + quoted spans JSON + EOS), or None when the target is over budget. Omissions are named
    in the critique; the target carries no anchors (the generative model is not trained to place them)."""
    shown = render_rm_prompt(tokenizer, item.task, item.prompt, item.response, cfg.max_prompt_tokens)
    stats.n_prompt_truncated += int(shown.truncated)
    visible_end = len(item.response) if shown.response == item.response else len(shown.response) - len(TRUNCATION_MARK)
    visible = [s for s in spans if s.end <= visible_end]
    stats.n_spans_truncated += len(spans) - len(visible)
    stats.n_spans_kept += len(visible)
    good = _dedupe([s.text for s in visible if s.label == "positive"])
    poor = _dedupe([s.text for s in visible if s.label == "negative"])
    target = build_rm_target(critique, good, poor, tokenizer.eos_token)
    if count_tokens(tokenizer, target) > cfg.max_target_tokens:
        return None
    return shown.text, target


def _tagger_row(item, critique, spans: list[GoldSpan], tokenizer, cfg, stats: RMDataStats, missing=()):
    """(policy prompt, span JSON with the located spans and omissions), or None when the response is over budget."""
    if count_tokens(tokenizer, item.response) > cfg.max_target_tokens:
        return None
    stats.n_spans_kept += len(spans)
    stats.n_missing += len(missing)
    prompt = render_policy_prompt(tokenizer, item.task, item.prompt)
    return prompt, build_tagger_target(critique, spans, missing, len(item.response))


ROW_BUILDERS = {"generative": _generative_row, "tagger": _tagger_row}


def build_tagger_target(
    critique: str | None, spans: list[GoldSpan], missing: Sequence[tuple[str, int | None]] = (), end: int = 0
) -> str:
    """The tagger's target: the span JSON plus ``located`` ``[start, end, label]`` character spans, and the content
    the annotator reports ``missing`` with ``missing_at``, where each item belonged (an unknown place: ``end``, the
    end of the response)."""
    obj = {
        "critique": critique or "",
        "good_spans": _dedupe([s.text for s in spans if s.label == "positive"]),
        "poor_spans": _dedupe([s.text for s in spans if s.label == "negative"]),
        "located": [[s.start, s.end, s.label] for s in spans],
        "missing": [text for text, _ in missing],
        "missing_at": [end if at is None else min(int(at), end) for _, at in missing],
    }
    return json.dumps(obj, ensure_ascii=False)


def annotation_missing(annotation) -> list[tuple[str, int | None]]:
    """(item, char offset or None) of each missing item an annotations row reports (none in rows written before the
    annotations carried them)."""
    texts = getattr(annotation, "missing", None)
    if texts is None or (isinstance(texts, float) and pd.isna(texts)):
        return []
    at = getattr(annotation, "missing_at", None)
    at = [] if at is None or (isinstance(at, float) and pd.isna(at)) else list(at)
    at = [None if pd.isna(a) else int(a) for a in at] + [None] * (len(texts) - len(at))
    return list(zip((str(t) for t in texts), at[: len(texts)], strict=True))


def parse_rm_target(target: str, eos: str | None = None) -> ParsedFeedback:
    """The feedback a target encodes (either kind's): critique, quotes, and the located spans when present."""
    text = target.removesuffix(eos) if eos else target
    parsed = parse_span_json(text)
    try:
        located = json.loads(text).get("located") if parsed.ok else None
    except (ValueError, AttributeError):
        located = None
    if not located and not parsed.missing:
        return parsed
    return replace(
        parsed,
        located=tuple((int(s), int(e), str(lab)) for s, e, lab in located or ()),
        missing_at=_missing_at(text, len(parsed.missing)),
    )


def _missing_at(text: str, n: int) -> tuple[int | None, ...]:
    """The ``missing_at`` offsets of a target (None where it gives none)."""
    try:
        at = json.loads(text).get("missing_at") or []
    except (ValueError, AttributeError):
        at = []
    at = [int(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else None for a in at][:n]
    return tuple(at) + (None,) * (n - len(at))


def build_rm_data(
    feedback_df: pd.DataFrame,
    annotations_df: pd.DataFrame,
    tokenizer,
    cfg,
    *,
    spans_df: pd.DataFrame | None = None,
    align_cfg=None,
) -> tuple[pd.DataFrame, RMDataStats]:
    """``rm_data`` rows for every item with an ok annotation, and counts of what was skipped or dropped."""
    ann = annotations_df[annotations_df["status"] == "ok"].drop_duplicates(subset="id", keep="first").set_index("id")
    stats, rows = RMDataStats(n_items=len(feedback_df)), []
    for item in feedback_df.itertuples(index=False):
        if item.id not in ann.index:
            stats.n_no_ok_annotation += 1
            stats.skipped_ids.append(item.id)
            continue
        a = ann.loc[item.id]
        spans, n_unmatched = locate_gold_spans(
            item.response,
            list(a.good_spans),
            list(a.poor_spans),
            spans_df=spans_df,
            item_id=item.id,
            align_cfg=align_cfg,
        )
        stats.n_spans_unmatched += n_unmatched
        row = ROW_BUILDERS[cfg.kind](item, a.critique, spans, tokenizer, cfg, stats, annotation_missing(a))
        if row is None:
            stats.n_target_too_long += 1
            stats.skipped_ids.append(item.id)
            continue
        rows.append((item.id, split_for_id(item.id, cfg.val_fraction), *row))  # row: (rm_prompt, rm_target)
    df = pd.DataFrame(rows, columns=["id", "split", "rm_prompt", "rm_target"])
    stats.n_rows = len(df)
    stats.n_train = int((df["split"] == "train").sum())
    stats.n_validation = int((df["split"] == "validation").sum())
    return df, stats
