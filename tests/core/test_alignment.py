"""Alignment metrics and the align stage on frames (the ``t2g align`` command: tests/cli)."""

from __future__ import annotations

import pandas as pd
import pytest

from t2g_core.alignment import alignment_stats, iou, label_stats, micro_prf, span_prf, token_prf
from t2g_core.config.align import AlignConfig
from t2g_core.schemas import SchemaError
from t2g_core.spans import align_frame, spans_by_item
from t2g_core.store import read_artifact, write_parquet
from tests.core._align_frames import annotations_frame, feedback_frame

# ---------------------------------------------------------------- metrics


def test_iou_of_intervals():
    assert iou((0, 10), (5, 15)) == pytest.approx(5 / 15)
    assert iou((0, 5), (5, 10)) == 0.0 and iou((3, 7), (3, 7)) == 1.0


def test_span_prf_counts_label_and_iou():
    gold = [(0, 10, "negative"), (20, 30, "positive")]
    pred = [(1, 10, "negative"), (20, 30, "negative"), (40, 45, "positive")]
    r = span_prf(pred, gold)
    assert (r["tp"], r["n_pred"], r["n_gold"]) == (1, 3, 2)  # the second pred has the wrong label
    assert r["precision"] == pytest.approx(1 / 3) and r["recall"] == pytest.approx(1 / 2)
    assert r["f1"] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert r["mean_iou"] == pytest.approx(0.9)
    assert span_prf([(0, 3, "negative")], [(0, 10, "negative")])["tp"] == 0  # IoU 0.3 < 0.5
    assert span_prf([(0, 3, "negative")], [(0, 10, "negative")], iou_threshold=0.2)["tp"] == 1


def test_span_prf_is_one_to_one_and_handles_empty():
    r = span_prf([(0, 10, "negative"), (0, 9, "negative")], [(0, 10, "negative")])
    assert (r["tp"], r["precision"], r["recall"]) == (1, 0.5, 1.0)
    assert span_prf([], [])["f1"] == 1.0
    assert span_prf([], [(0, 1, "positive")])["recall"] == 0.0
    assert span_prf([(0, 1, "positive")], [])["precision"] == 0.0


def test_token_prf_signed_and_per_label():
    gold = [0, 1, 1, -1, -1, 0]
    pred = [0, 1, -1, -1, 0, 1]
    r = token_prf(pred, gold)
    assert (r["tp"], r["n_pred"], r["n_gold"]) == (2, 4, 4)  # tokens 1 and 3 agree in sign
    assert r["iou"] == pytest.approx(2 / 6)
    assert r["positive"]["tp"] == 1 and r["positive"]["n_pred"] == 2 and r["positive"]["n_gold"] == 2
    assert r["negative"]["recall"] == pytest.approx(1 / 2)
    with pytest.raises(ValueError, match="3 predicted labels but 2 gold"):
        token_prf([0, 0, 0], [0, 0])


def test_micro_prf_sums_counts():
    a, b = span_prf([(0, 5, "negative")], [(0, 5, "negative")]), span_prf([(0, 5, "negative")], [(9, 12, "negative")])
    m = micro_prf([a, b])
    assert (m["tp"], m["n_pred"], m["n_gold"], m["precision"]) == (1, 2, 2, 0.5)
    assert m["iou"] == pytest.approx(1 / 3)


def test_label_stats():
    s = label_stats([[0, 1, 1, -1], [0, 0]])
    assert s["tokens"] == 6 and s["labelled_token_frac"] == pytest.approx(0.5)
    assert s["label_balance"] == pytest.approx(2 / 3) and s["negative_token_frac"] == pytest.approx(1 / 6)


# ---------------------------------------------------------------- the align stage


def test_align_frame_writes_valid_spans_and_keeps_unmatched(tmp_path):
    fb = feedback_frame()
    spans = align_frame(fb, annotations_frame())
    write_parquet(spans, tmp_path / "spans.parquet", "spans")  # validates the schema
    back = read_artifact(tmp_path / "spans.parquet", "spans")
    assert list(back["id"]) == ["sum-1"] * 3 + ["sum-2"]
    assert list(back["match"]) == ["exact", "normalized", "unmatched", "normalized"]
    assert list(back["label"]) == ["positive", "negative", "negative", "negative"]
    r = fb["response"][0]
    assert r[int(back["start"][1]) : int(back["end"][1])] == "lives in “Paris”"
    assert pd.isna(back["start"][2])
    items = spans_by_item(back)
    assert [s.match for s in items["sum-1"]] == ["exact", "normalized", "unmatched"] and items["sum-1"][2].start is None
    stats = alignment_stats(back, dict(zip(fb["id"], fb["response"], strict=True)))
    assert stats["n_spans"] == 4 and stats["unmatched_rate"] == pytest.approx(0.25)
    assert stats["match_normalized_frac"] == pytest.approx(0.5) and 0 < stats["labelled_char_frac"] < 1


def test_align_frame_rejects_unknown_items_and_ambiguous_annotators():
    fb = feedback_frame()
    ann = annotations_frame(("sum-1", "sum-2"))
    ann.loc[1, "id"] = "sum-404"
    with pytest.raises(SchemaError, match="row 1.*'sum-404' is not in the feedback"):
        align_frame(fb, ann, annotations_file="ann.parquet")
    two = pd.concat([annotations_frame(("sum-1",)), annotations_frame(("sum-1",), annotator="llm")], ignore_index=True)
    with pytest.raises(SchemaError, match="several annotators"):
        align_frame(fb, two)
    assert len(align_frame(fb, two, AlignConfig(annotator="llm"))) == 3
