"""The align stage on frames: annotations to ``spans`` artifact rows, and back (the package's step 4)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from t2g_core.config.align import AlignConfig
from t2g_core.spans.locate import AlignedSpan, align_feedback
from t2g_core.spans.parsing import ParsedFeedback

if TYPE_CHECKING:
    from t2g_core.config.align import AlignConfig


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
    """The ``spans`` artifact: one row per quoted span (good, then poor) of every ``ok`` annotation; unmatched spans
    have null offsets. Raises SchemaError naming the row for an item missing from the feedback or annotated twice."""
    import pandas as pd

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
        rows += [{"id": rec.id, "span_index": k, **asdict(a)} for k, a in enumerate(aligned)]
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
