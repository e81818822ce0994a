"""``t2g align``: spans and metrics written where asked, a bad input file named, token metrics with a tokenizer."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from t2g_cli import app
from t2g_core.store import read_artifact, write_parquet
from tests.core import _tokenizers
from tests.core._align_frames import annotations_frame, feedback_frame


def test_cli_align_writes_spans_and_prints_metrics(tmp_path):
    fb_path, ann_path, out = tmp_path / "feedback.parquet", tmp_path / "ann.parquet", tmp_path / "spans.parquet"
    write_parquet(feedback_frame(), fb_path, "feedback")
    write_parquet(annotations_frame(), ann_path, "annotations")
    result = CliRunner().invoke(
        app, ["align", str(fb_path), str(ann_path), "-o", str(out), "--set", "align.fuzzy_threshold=90"]
    )
    assert result.exit_code == 0, result.output
    assert "unmatched_rate" in result.output and "4 spans from 2 items" in result.output
    assert len(read_artifact(out, "spans")) == 4
    assert json.loads(out.with_suffix(".metrics.json").read_text())["unmatched_rate"] == pytest.approx(0.25)
    # an artifact folder instead of a file
    result = CliRunner().invoke(app, ["align", str(fb_path), str(ann_path), "-o", str(tmp_path / "spans")])
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "spans").iterdir()
    assert len(read_artifact(folder, "spans")) == 4


def test_cli_align_names_bad_file(tmp_path):
    fb_path = tmp_path / "feedback.parquet"
    write_parquet(feedback_frame(), fb_path, "feedback")
    bad = annotations_frame().drop(columns=["status"])
    bad.to_parquet(tmp_path / "ann.parquet")
    result = CliRunner().invoke(
        app, ["align", str(fb_path), str(tmp_path / "ann.parquet"), "-o", str(tmp_path / "s.parquet")]
    )
    assert result.exit_code != 0 and "ann.parquet" in result.output and "status" in result.output


def test_cli_align_reports_token_metrics_with_a_tokenizer(tmp_path):
    fb_path, ann_path = tmp_path / "feedback.parquet", tmp_path / "ann.parquet"
    write_parquet(feedback_frame(), fb_path, "feedback")
    write_parquet(annotations_frame(), ann_path, "annotations")
    _tokenizers.byte_level_bpe().save_pretrained(tmp_path / "tok")
    out = tmp_path / "spans.parquet"
    result = CliRunner().invoke(
        app, ["align", str(fb_path), str(ann_path), "-o", str(out), "--tokenizer", str(tmp_path / "tok")]
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads(out.with_suffix(".metrics.json").read_text())
    assert 0 < metrics["labelled_token_frac"] < 1 and 0 < metrics["label_balance"] < 1
