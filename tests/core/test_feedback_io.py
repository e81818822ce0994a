"""Feedback loading: Parquet, JSONL, CSV and datasets folders, with errors naming file, row and column."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from t2g_core.feedback import load_feedback
from t2g_core.schemas import SchemaError

ROWS = [
    {
        "id": "a",
        "task": "summarization",
        "prompt": "p1",
        "response": "r1",
        "reference": "ref",
        "meta": {"facts": {"city": "oslo"}},
    },
    {"id": "b", "task": "qa", "prompt": "p2", "response": "r2", "critique": "too vague"},
    {
        "id": "c",
        "task": "code",
        "prompt": "def f():",
        "response": "  return 1",
        "tests": "def check(c): assert c() == 1",
        "entry_point": "f",
    },
]


def _jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "hf"])
def test_good_feedback_loads_in_every_format(tmp_path, fmt):
    src = _jsonl(tmp_path / "f.jsonl", ROWS)
    if fmt == "csv":
        df = pd.read_json(src, lines=True)
        df["meta"] = [json.dumps(m) if isinstance(m, dict) else None for m in df["meta"]]
        src = tmp_path / "f.csv"
        df.to_csv(src, index=False)
    elif fmt == "parquet":
        df = load_feedback(tmp_path / "f.jsonl")
        src = tmp_path / "f.parquet"
        df.to_parquet(src)
    elif fmt == "hf":
        import datasets

        df = load_feedback(tmp_path / "f.jsonl")
        src = tmp_path / "hf"
        datasets.Dataset.from_pandas(df).save_to_disk(str(src))
    out = load_feedback(src)
    assert out["id"].tolist() == ["a", "b", "c"]
    assert json.loads(out["meta"][0]) == {"facts": {"city": "oslo"}}
    assert out["critique"][1] == "too vague"


def _error(tmp_path, rows) -> SchemaError:
    with pytest.raises(SchemaError) as exc:
        load_feedback(_jsonl(tmp_path / "bad.jsonl", rows))
    return exc.value


def test_missing_column_names_it(tmp_path):
    err = _error(tmp_path, [{k: v for k, v in r.items() if k != "prompt"} for r in ROWS])
    assert err.column == "prompt" and "missing column" in str(err) and "bad.jsonl" in str(err)


def test_wrong_type_names_row_and_column(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[2]["prompt"] = 42
    err = _error(tmp_path, rows)
    assert (err.row, err.column) == (2, "prompt") and "expected text" in str(err)


def test_unknown_task_value(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[1]["task"] = "poetry"
    err = _error(tmp_path, rows)
    assert (err.row, err.column) == (1, "task") and "summarization, code, qa" in str(err)


def test_duplicate_ids(tmp_path):
    rows = [dict(r) for r in ROWS] + [dict(ROWS[0])]
    err = _error(tmp_path, rows)
    assert (err.row, err.column) == (3, "id") and "duplicate" in str(err)


def test_empty_string(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[0]["id"] = "   "
    err = _error(tmp_path, rows)
    assert (err.row, err.column) == (0, "id") and "empty string" in str(err)


def test_non_utf8_input_names_the_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(ROWS[0]).encode() + b"\n" + '{"id": "caf\u00e9"}'.encode("latin-1") + b"\n")
    with pytest.raises(SchemaError, match=r"line 2 is not valid UTF-8"):
        load_feedback(path)


def test_broken_json_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n{not json}\n", encoding="utf-8")
    with pytest.raises(SchemaError, match=r"broken.jsonl: line 2 is not valid JSON"):
        load_feedback(path)


def test_invalid_meta_json_in_csv(tmp_path):
    df = pd.DataFrame([{"id": "a", "task": "qa", "prompt": "p", "response": "r", "meta": "{oops"}])
    path = tmp_path / "f.csv"
    df.to_csv(path, index=False)
    with pytest.raises(SchemaError) as exc:
        load_feedback(path)
    assert (exc.value.row, exc.value.column) == (0, "meta")


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


def _many(n: int, start: int = 0) -> list[dict]:
    return [{"id": f"i{start + i}", "task": "qa", "prompt": f"p{i}", "response": "r" * 40} for i in range(n)]


def _write(path, rows, fmt: str) -> None:
    if fmt == "jsonl":
        _jsonl(path, rows)
    elif fmt == "csv":
        pd.DataFrame(rows).to_csv(path, index=False)
    else:
        pd.DataFrame(rows).to_parquet(path)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_feedback_is_checked_in_pieces_with_rows_counted_from_the_start(tmp_path, fmt):
    from t2g_core.feedback import iter_feedback

    rows, path = _many(25), tmp_path / f"f.{fmt}"
    _write(path, rows, fmt)
    assert [len(piece) for piece in iter_feedback(path, rows=10)] == [10, 10, 5]
    for row, column, value, named in ((21, "id", "i2", "duplicate id 'i2'"), (23, "task", "poetry", "poetry")):
        bad = [dict(r) for r in rows]
        bad[row][column] = value  # in another piece than the row it repeats (2)
        _write(path, bad, fmt)
        with pytest.raises(SchemaError) as exc:
            list(iter_feedback(path, rows=10))
        assert (exc.value.row, exc.value.column) == (row, column) and named in str(exc.value)


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
