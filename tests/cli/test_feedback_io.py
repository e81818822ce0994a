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


def test_a_line_over_the_cap_is_refused_naming_it_without_being_read_whole(tmp_path, monkeypatch):
    """A 50 MB row against a cap lowered to 1 MiB (t2g_core.feedback.MAX_LINE_BYTES; before: a 1 GB line was read,
    decoded and parsed whole, 3.24 GB): one error naming the line, in the memory of the cap, not of the line."""
    import tracemalloc

    from typer.testing import CliRunner

    from t2g_cli import app
    from t2g_core import feedback

    monkeypatch.setattr(feedback, "MAX_LINE_BYTES", 1 << 20, raising=False)
    path = tmp_path / "long.jsonl"
    with open(path, "wb") as f:
        f.write(json.dumps(ROWS[1]).encode() + b'\n{"id": "x", "task": "qa", "response": "r", "prompt": "')
        for _ in range(50):
            f.write(b"p" * (1 << 20))
        f.write(b'"}\n' + json.dumps(ROWS[2]).encode() + b"\n")
    tracemalloc.start()
    try:
        result = CliRunner().invoke(app, ["feedback", "check", str(path)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 2, result.output
    assert "long.jsonl: line 2 is longer than 1,048,576 bytes" in result.output and "Traceback" not in result.output
    assert peak < 8 << 20, peak  # the line is 50 MiB
    with pytest.raises(feedback.SchemaError, match="line 2 is longer than"):
        feedback.load_feedback(path)
