"""Hostile or broken input files: one line naming the file (and row and column where they apply), exit 2.

Before: empty or corrupt CSV/Parquet, YAML syntax errors and a missing config file gave raw tracebacks (exit 1);
ids that were NaN, booleans, objects or lists were silently turned into text; ``Infinity`` in ``meta`` was accepted;
a lone surrogate (``\\ud800``) in a JSONL file gave a raw pyarrow UnicodeEncodeError.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from t2g_cli import app

ROW = {"task": "qa", "prompt": "p", "response": "r"}
JSONL = {
    "boolean id": ({**ROW, "id": True}, "row 0, column 'id': expected text, got bool"),
    "list id": ({**ROW, "id": [1, 2]}, "row 0, column 'id': expected text, got list"),
    "object id": ({**ROW, "id": {"a": 1}}, "row 0, column 'id': expected text, got dict"),
    "null id": ({**ROW, "id": None}, "row 0, column 'id': is empty"),
    "fractional id": ({**ROW, "id": 1.5}, "row 0, column 'id': expected text, got float"),
    "Infinity in meta": ({**ROW, "id": "a", "meta": '{"x": Infinity}'}, "column 'meta': holds Infinity"),
    "NaN in meta": ({**ROW, "id": "a", "meta": '{"x": NaN}'}, "column 'meta': holds NaN"),
    "lone surrogate": ({**ROW, "id": "a", "response": "r \ud800"}, "row 0, column 'response': holds a lone surrogate"),
}
runner = CliRunner()


def _one_line_exit_2(result, *expected: str) -> None:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and all(e in lines[0] for e in expected), lines[0]


@pytest.mark.parametrize("case", list(JSONL))
def test_bad_values_name_the_row_and_column(case, tmp_path):
    row, expected = JSONL[case]
    path = tmp_path / "fb.jsonl"
    path.write_text(json.dumps(row) + "\n")
    _one_line_exit_2(runner.invoke(app, ["feedback", "check", str(path)]), str(path), expected)


def test_integer_ids_become_text_explicitly(tmp_path):
    path = tmp_path / "fb.jsonl"
    path.write_text(json.dumps({**ROW, "id": 7}) + "\n")
    from t2g_core.feedback import load_feedback

    assert load_feedback(path)["id"].tolist() == ["7"]


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("empty.csv", b"", "is empty"),
        ("empty.parquet", b"", "cannot be read as Parquet"),
        ("corrupt.parquet", b"PAR1 not really", "cannot be read as Parquet"),
        ("binary.csv", b"\xff\xfe\x00id", "not valid UTF-8"),
        ("broken.jsonl", b'{"id": "a", "task": ', "line 1 is not valid JSON"),
    ],
)
def test_empty_and_corrupt_files(tmp_path, name, content, expected):
    path = tmp_path / name
    path.write_bytes(content)
    _one_line_exit_2(runner.invoke(app, ["feedback", "check", str(path)]), str(path), expected)
    out = tmp_path / "ann.parquet"
    _one_line_exit_2(runner.invoke(app, ["annotate", str(path), "-o", str(out), "-q"]), str(path))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ppo:\n  steps: [1,\n", "line 3, column 1: not valid YAML"),
        ("- just\n- a list\n", "the top level must be a mapping"),
        ("ppo:\n  stepz: 3\n", "ppo.stepz: Extra inputs are not permitted"),
    ],
)
def test_config_file_errors(tmp_path, text, expected):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    for args in (["config", "show", "-c", str(path)], ["run", "-c", str(path)]):
        _one_line_exit_2(runner.invoke(app, args), str(path), expected)


def test_a_missing_config_file_and_bad_overrides(tmp_path):
    _one_line_exit_2(runner.invoke(app, ["run", "-c", str(tmp_path / "nope.yaml")]), "no such configuration file")
    _one_line_exit_2(runner.invoke(app, ["config", "show", "--set", "ppo.steps=[1"]), "not valid YAML")
    _one_line_exit_2(runner.invoke(app, ["config", "show", "--set", "ppo.steps"]), "key.path=value")


CANARY = "hunter2-canary"


@pytest.mark.parametrize(
    ("column", "rows", "named"),
    [
        ("id", [{**ROW, "id": CANARY}, {**ROW, "id": CANARY}], "row 1, column 'id': duplicate id: the same as row 0"),
        ("task", [{**ROW, "id": "a", "task": CANARY}], "row 0, column 'task': is not one of"),
        ("id", [{**ROW, "id": {"password": CANARY}}], "row 0, column 'id': expected text, got dict"),
    ],
)
def test_a_refusal_names_the_row_and_column_never_the_value(tmp_path, column, rows, named):
    """A file's cells stay out of error messages (a served run's message is read by whoever reaches the API); the file,
    row and column say where to look."""
    path = tmp_path / "fb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["feedback", "check", str(path)])
    _one_line_exit_2(result, named)
    assert CANARY not in result.output
