"""Dataset adapters on small fixture files written in each dataset's published format."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from t2g_core.ingest import IngestError, ingest

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def _run_check(row: dict, program: str) -> None:
    """Run a feedback row's HumanEval-format tests against ``program`` (trusted fixture code, in-process)."""
    ns: dict = {}
    exec(compile(program, "solution.py", "exec"), ns)
    exec(compile(row["tests"], "tests.py", "exec"), ns)
    ns["check"](ns[row["entry_point"]])


def test_slf5k_maps_fields():
    df = ingest("slf5k", path=FIX / "slf5k", split="train")
    row = df.iloc[0]
    assert row["id"] == "slf5k-t3_1a2b3c" and row["task"] == "summarization"
    assert row["prompt"].startswith("TITLE: My (24F) roommate") and "POST: I moved in" in row["prompt"]
    assert row["response"] == "My roommate eats my food and I want to move out."
    assert "invents that the poster wants to move out" in row["critique"]
    assert row["reference"].startswith("My roommate eats my groceries")
    assert json.loads(row["meta"])["feedback_class"] == "Accuracy"


def test_ultrafeedback_one_row_per_side():
    df = ingest("ultrafeedback", path=FIX / "ultrafeedback", split="train_prefs")
    assert df["id"].tolist() == ["uf-a1b2c3-chosen", "uf-a1b2c3-rejected", "uf-d4e5f6-chosen", "uf-d4e5f6-rejected"]
    assert df["response"].tolist()[:2] == [
        "The capital of Australia is Canberra.",
        "The capital of Australia is Sydney.",
    ]
    metas = [json.loads(m) for m in df["meta"]]
    assert [m["score"] for m in metas] == [9.0, 2.0, 8.5, 1.0] and metas[1]["is_chosen"] is False


def test_kodcode_tests_run_and_catch_a_bug():
    df = ingest("kodcode", path=FIX / "kodcode" / "train.jsonl")
    row = df.iloc[0].to_dict()
    assert row["entry_point"] == "add_two" and row["prompt"].startswith("Write a function `add_two")
    _run_check(row, row["response"])
    with pytest.raises(AssertionError):
        _run_check(row, row["response"].replace("a + b", "a - b"))


def test_mbpp_asserts_become_check_candidate():
    df = ingest("mbpp", path=FIX / "mbpp", split="test")
    row = df.iloc[1].to_dict()
    assert row["entry_point"] == "square_perimeter" and "candidate(10)==40" in row["tests"]
    _run_check(row, row["response"])
    with pytest.raises(AssertionError):
        _run_check(row, row["response"].replace("4*a", "3*a"))


def test_humaneval_ships_with_the_package():
    df = ingest("humaneval", limit=5)
    assert len(df) == 5 and df["id"][0] == "humaneval-0"
    row = df.iloc[0].to_dict()
    _run_check(row, row["prompt"] + row["response"])


def test_limit_and_split_errors(tmp_path):
    assert len(ingest("ultrafeedback", path=FIX / "ultrafeedback", split="train_prefs", limit=3)) == 3
    with pytest.raises(IngestError, match="no file for split 'validation'"):
        ingest("slf5k", path=FIX / "slf5k", split="validation")
    with pytest.raises(IngestError, match="unknown dataset; known: humaneval, kodcode, mbpp, slf5k, ultrafeedback"):
        ingest("alpaca", path=FIX)


def test_renamed_field_lists_the_expected_ones(tmp_path):
    rows = [json.loads(line) for line in (FIX / "slf5k" / "train.jsonl").read_text().splitlines()]
    rows[1]["generated_summary"] = rows[1].pop("generated_summary_for_feedback")  # the reference code's older name
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(IngestError) as exc:
        ingest("slf5k", path=path)
    err = exc.value
    assert err.row == 1 and err.column == "generated_summary_for_feedback"
    assert "expected fields: id, post, generated_summary_for_feedback, feedback, ideal_human_summary" in str(err)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("train.jsonl", '{"id": 1}\n{"id": ' + "[" * 100_000 + "}\n", "line 2 nests arrays or objects too deeply"),
        ("train.json", '[{"id": 1},\n{"id": ' + "[" * 100_000 + "}]", "line 1 nests arrays or objects too deeply"),
        ("train.json", '[{"id": 1},\n{"id": }]', "line 2 is not valid JSON: Expecting value"),
    ],
)
def test_json_deeper_than_the_stack_or_broken_is_one_error_naming_the_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(IngestError, match=message) as exc:
        ingest("slf5k", path=path)
    assert str(path) in str(exc.value)


def test_kodcode_renames_only_the_entry_point_itself():
    from t2g_core.ingest.code import _kodcode_check

    test = (
        "from solution import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"
        "    assert ops.add(1, 2) == 'add(1, 2)'\n"
    )
    check, skipped = _kodcode_check(test, "add")
    assert "assert candidate(1, 2) == 3" in check
    assert "assert ops.add(1, 2) == 'add(1, 2)'" in check and skipped == []


# --------------------------------------------------------------------------------------------- any dataset by columns
def _qa_shards(folder, n=12):
    """A dataset folder of two Parquet shards, the second one corrupt: reading past the first shard fails."""
    folder.mkdir()
    pd.DataFrame(
        {
            "qid": [f"q{i}" for i in range(n)],
            "question": [f"What is {i} + 1?" for i in range(n)],
            "answer": [str(i + 1) for i in range(n)],
            "gold": [str(i + 1) for i in range(n)],
            "extra": [[i, i] for i in range(n)],
        }
    ).to_parquet(folder / "train-00000-of-00002.parquet")
    (folder / "train-00001-of-00002.parquet").write_bytes(b"not parquet at all")
    return folder


def test_any_dataset_through_a_column_mapping_reads_only_the_rows_asked_for(tmp_path):
    from t2g_core.ingest.mapped import mapped_feedback

    folder = _qa_shards(tmp_path / "qa")
    columns = {"id": "qid", "prompt": "question", "response": "answer", "reference": "gold"}
    df = mapped_feedback(str(folder), columns, task="qa", limit=5)
    assert df["id"].tolist() == [f"q{i}" for i in range(5)] and set(df["task"]) == {"qa"}
    assert df["prompt"][2] == "What is 2 + 1?" and df["reference"][2] == "3" and df["critique"].isna().all()
    with pytest.raises(IngestError, match="could not be read"):  # all rows: the corrupt shard is reached
        mapped_feedback(str(folder), columns, task="qa")


def test_a_recipe_can_name_any_dataset_with_columns(tmp_path):
    from t2g_core.config import load_config
    from t2g_core.stages.feedback import source_frame
    from t2g_core.stages.refs import SourceRef

    (tmp_path / "recipes").mkdir()
    folder = _qa_shards(tmp_path / "recipes" / "qa")
    (tmp_path / "recipes" / "r.yaml").write_text(
        "data: {dataset: qa, columns: {prompt: question, response: answer}, task: qa, limit: 4}\n"
    )
    cfg = load_config(tmp_path / "recipes" / "r.yaml")
    assert cfg.data.dataset == str(folder)  # relative to the recipe
    assert len(source_frame(cfg.data)) == 4
    assert SourceRef.of(cfg.data).origin == f"dataset:{folder}"
    with pytest.raises(ValueError, match="set data.dataset too"):
        load_config(None, ["data.columns={prompt: q, response: a}"])
