"""`t2g feedback check`: one clear error naming file, row and column, no traceback."""

from __future__ import annotations

from tests.core._feedback_rows import ROWS, _jsonl


def test_cli_reports_one_clear_error(tmp_path):
    from typer.testing import CliRunner

    from t2g_cli import app

    rows = [dict(r) for r in ROWS]
    rows[1]["task"] = "poetry"
    path = _jsonl(tmp_path / "bad.jsonl", rows)
    result = CliRunner().invoke(app, ["feedback", "check", str(path)])
    assert result.exit_code == 2
    assert "bad.jsonl, row 1, column 'task'" in result.output
    assert "Traceback" not in result.output
    ok = CliRunner().invoke(app, ["feedback", "check", str(_jsonl(tmp_path / "ok.jsonl", ROWS))])
    assert ok.exit_code == 0 and "3 valid items" in ok.output
