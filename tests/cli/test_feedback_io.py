"""`t2g feedback check`: one clear error naming file, row and column, no traceback."""

from __future__ import annotations

import json

import pytest

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


@pytest.mark.slow
def test_feedback_check_of_a_large_file_stays_in_the_memory_of_a_piece(tmp_path):
    """``t2g feedback check`` on about 120 MB of JSONL: its peak memory grows by far less than the file (before: the
    whole file as bytes, then as lines, then as rows, at once)."""
    import subprocess
    import sys

    line = json.dumps({"id": "x", "task": "qa", "prompt": "p" * 400, "response": "r" * 800}).encode()
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        for i in range(100_000):
            f.write(line.replace(b'"x"', f'"i{i}"'.encode()) + b"\n")
    small = _jsonl(tmp_path / "small.jsonl", ROWS)
    code = (
        "import resource, sys\n"
        "from typer.testing import CliRunner\n"
        "from t2g_cli import app\n"
        "out = CliRunner().invoke(app, ['feedback', 'check', sys.argv[1]])\n"
        "assert out.exit_code == 0, out.output\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)\n"  # MiB
    )

    def peak(path) -> int:
        done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return int(done.stdout.split()[-1])

    size_mb = big.stat().st_size >> 20
    assert size_mb > 100
    assert peak(big) - peak(small) < size_mb / 2, (peak(big), peak(small), size_mb)
