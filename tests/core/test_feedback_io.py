"""Feedback loading: Parquet, JSONL, CSV and datasets folders, with errors naming file, row and column."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from t2g_core.feedback import load_feedback
from t2g_core.schemas import SchemaError
from tests.core._feedback_rows import ROWS, _jsonl


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


DEEP = "[" * 100_000 + "]" * 100_000  # nested deeper than Python's stack (the JSON decoder's RecursionError)


def test_a_line_nested_deeper_than_the_stack_is_one_error_naming_the_line(tmp_path):
    from t2g_core.feedback import iter_feedback

    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + '{"id": "x", "meta": ' + DEEP + "}\n", encoding="utf-8")
    for read in (load_feedback, lambda p: list(iter_feedback(p))):
        with pytest.raises(SchemaError, match=r"deep.jsonl: line 2 nests arrays or objects too deeply to read"):
            read(path)


def test_meta_text_nested_deeper_than_the_stack_names_its_row(tmp_path):
    from t2g_core.annotators import feedback_rows

    path = tmp_path / "f.csv"
    pd.DataFrame([{**ROWS[1], "meta": "{}"}, {**ROWS[1], "id": "b2", "meta": DEEP}]).to_csv(path, index=False)
    with pytest.raises(SchemaError) as exc:
        load_feedback(path)
    assert (exc.value.row, exc.value.column) == (1, "meta") and "nested too deeply" in str(exc.value)
    frame = pd.DataFrame([{**ROWS[1], "meta": DEEP}])  # a frame that skipped validation: the annotator says where
    with pytest.raises(ValueError, match=r"feedback row 0 \(id 'b'\), column 'meta': invalid JSON \(nested too"):
        feedback_rows(frame)


def test_invalid_meta_json_in_csv(tmp_path):
    df = pd.DataFrame([{"id": "a", "task": "qa", "prompt": "p", "response": "r", "meta": "{oops"}])
    path = tmp_path / "f.csv"
    df.to_csv(path, index=False)
    with pytest.raises(SchemaError) as exc:
        load_feedback(path)
    assert (exc.value.row, exc.value.column) == (0, "meta")


@pytest.mark.parametrize(
    ("row", "column", "expected"),
    [
        ({"response": "r \ud800 r"}, "response", "lone surrogate U+D800 at character 2 (line 2;"),
        ({"meta": {"notes": ["ok", "x\udfff"]}}, "meta", "lone surrogate U+DFFF at character 1 (notes[1])"),
        ({"meta": '{"note": "\\ud83d"}'}, "meta", "escaped lone surrogate U+D83D (note)"),
    ],
)
def test_a_lone_surrogate_is_one_error_naming_file_row_and_column(tmp_path, row, column, expected):
    """JSON's ``\\ud800`` escapes carry text that is not valid Unicode (before: a raw pyarrow UnicodeEncodeError).
    Refused, not cleaned: the feedback is the data every later stage trusts, fixed where the error points."""
    rows = [ROWS[0], {**ROWS[1], **row}, {**ROWS[1], **row, "id": "b2"}]
    path = _jsonl(tmp_path / "f.jsonl", rows)  # json.dumps writes the surrogates as \u escapes
    with pytest.raises(SchemaError) as exc:
        load_feedback(path)
    assert (exc.value.file, exc.value.row, exc.value.column) == (str(path), 1, column)
    assert expected in str(exc.value) and "not valid Unicode" in str(exc.value)


def test_meta_that_json_cannot_hold_names_its_row(tmp_path):
    path = tmp_path / "f.parquet"
    pd.DataFrame([{**ROWS[1], "meta": {"when": pd.Timestamp("2024-01-01")}}]).to_parquet(path)
    with pytest.raises(SchemaError) as exc:
        load_feedback(path)
    assert (exc.value.row, exc.value.column) == (0, "meta") and "cannot be stored as JSON" in str(exc.value)


def test_meta_with_arrays_from_parquet_becomes_json(tmp_path):
    path = tmp_path / "f.parquet"
    pd.DataFrame([{**ROWS[1], "meta": {"facts": ["a", "b"], "n": 2}}]).to_parquet(path)
    assert json.loads(load_feedback(path)["meta"][0]) == {"facts": ["a", "b"], "n": 2}


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
    for row, column, value, named in (
        (21, "id", "i2", "duplicate id: the same as row 2"),
        (23, "task", "poetry", "is not one of"),
    ):
        bad = [dict(r) for r in rows]
        bad[row][column] = value  # in another piece than the row it repeats (2)
        _write(path, bad, fmt)
        with pytest.raises(SchemaError) as exc:
            list(iter_feedback(path, rows=10))
        assert (exc.value.row, exc.value.column) == (row, column) and named in str(exc.value)
    bad = [dict(r) for r in rows]
    bad[22]["response"] = "r \ud800 r"  # a lone surrogate in the third piece (JSONL carries it as an escape)
    if fmt == "jsonl":
        _write(path, bad, fmt)
        with pytest.raises(SchemaError) as exc:
            list(iter_feedback(path, rows=10))
        assert (exc.value.row, exc.value.column) == (22, "response") and "lone surrogate" in str(exc.value)
