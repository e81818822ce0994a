"""`t2g validate` and `t2g review`: a failed batch with a readable report, the offline review exported, filled in and
imported, and the command in a real subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t2g_cli import app
from t2g_core.review import load_sample
from t2g_core.store import write_parquet
from t2g_core.validation.synthetic import make_synthetic_batch


def _write_inputs(tmp_path, **kw):
    s = make_synthetic_batch(n_items=30, **kw)
    write_parquet(s.annotations, tmp_path / "ann.parquet", "annotations")
    write_parquet(s.spans, tmp_path / "spans.parquet", "spans")
    s.feedback.to_json(tmp_path / "fb.jsonl", orient="records", lines=True)
    return [str(tmp_path / "ann.parquet"), str(tmp_path / "spans.parquet"), "-f", str(tmp_path / "fb.jsonl")]


def test_cli_validate_fails_a_bad_batch_with_a_readable_report(tmp_path):
    args = _write_inputs(tmp_path, unmatched=0.3, all_positive=True)
    r = CliRunner().invoke(app, ["validate", *args, "-o", str(tmp_path / "rep")])
    assert r.exit_code == 1, r.output
    assert "FAILED gates" in r.output and "unmatched_rate" in r.output and "minority_label_frac" in r.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Worst items: unmatched_rate" in md and (tmp_path / "rep" / "checks.png").exists()


def test_cli_offline_review_pending_then_imported(tmp_path):
    args = _write_inputs(tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["validate", *args, "--review", "offline", "-o", str(tmp_path / "rep")])
    assert r.exit_code == 3, r.output
    sheet = tmp_path / "rep" / "review" / "sheet.jsonl"
    lines = [json.loads(x) | {"agree": True} for x in sheet.read_text().splitlines()]
    sheet.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = runner.invoke(app, ["review", "import", str(sheet), "--sample", str(tmp_path / "rep" / "review")])
    assert r.exit_code == 0, r.output
    assert f"{len(lines)}/{len(lines)} = 1.000" in r.output
    r = runner.invoke(
        app, ["validate", *args, "--review", "offline", "--verdicts", str(sheet), "-o", str(tmp_path / "rep2")]
    )
    assert r.exit_code == 0, r.output
    assert "all gates passed" in r.output
    r = runner.invoke(
        app, ["review", "export", *args, "-o", str(tmp_path / "again")]
    )  # same data and seed: same sample
    assert r.exit_code == 0, r.output
    assert load_sample(tmp_path / "again") == load_sample(tmp_path / "rep" / "review")


@pytest.mark.slow
def test_cli_validate_in_a_real_subprocess(tmp_path):
    args = _write_inputs(tmp_path, flip=0.4)
    t2g = str(Path(sys.executable).parent / "t2g")
    out = subprocess.run(
        [t2g, "validate", *args, "-o", str(tmp_path / "rep")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "human_alignment[summarization]" in out.stdout
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["status"] == "fail" and report["alignment"]["reviewer"] == "ground-truth"


def test_cli_validate_prints_skipped_gates_when_no_item_is_ok(tmp_path):
    """Before: the sample crashed (no ok item), and the summary crashed on any skipped gate (``None:.4g``)."""
    s = make_synthetic_batch(n_items=6)
    failed = s.annotations.assign(status="api_error", good_spans=[[]] * 6, poor_spans=[[]] * 6, critique=None)
    write_parquet(failed, tmp_path / "ann.parquet", "annotations")
    write_parquet(s.spans.iloc[:0], tmp_path / "spans.parquet", "spans")
    s.feedback.to_json(tmp_path / "fb.jsonl", orient="records", lines=True)
    args = [str(tmp_path / "ann.parquet"), str(tmp_path / "spans.parquet"), "-f", str(tmp_path / "fb.jsonl")]
    for review in ("auto", "none"):  # with a review sample, and the summary alone
        r = CliRunner().invoke(app, ["validate", *args, "--review", review, "-o", str(tmp_path / review)])
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (r.exception, r.output)
        assert re.search(r"SKIPPED +unmatched_rate +- ", r.output), r.output
        assert "FAILED gates" in r.output and "failure_rate" in r.output
