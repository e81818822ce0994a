"""`t2g ingest`: a named dataset or any file through a column mapping, written as feedback; bad inputs named."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from t2g_cli import app

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def test_cli_ingest_writes_feedback(tmp_path):
    from typer.testing import CliRunner

    from t2g_cli import app
    from t2g_core.feedback import load_feedback

    out = tmp_path / "fb.parquet"
    result = CliRunner().invoke(app, ["ingest", "kodcode", "--path", str(FIX / "kodcode"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert load_feedback(out)["id"].tolist() == ["kodcode-Leetcode_1001_I", "kodcode-Apps_2002_I"]
    bad = CliRunner().invoke(app, ["ingest", "slf5k", "--path", str(FIX / "kodcode"), "-o", str(out)])
    assert bad.exit_code == 2 and "no file for split 'train'" not in bad.output and "lacks field" in bad.output


def test_the_ingest_command_maps_columns_of_a_file_and_names_a_missing_column(tmp_path):
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps({"q": f"Post {i}", "a": f"Summary {i}"}) + "\n" for i in range(4)))
    out = tmp_path / "fb.parquet"
    args = ["ingest", "--dataset", str(src), "--columns", "prompt=q,response=a", "--limit", "3", "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(out)
    assert len(df) == 3 and df["id"].tolist() == ["pairs-0", "pairs-1", "pairs-2"]
    assert df["response"].tolist() == ["Summary 0", "Summary 1", "Summary 2"]
    bad = CliRunner().invoke(
        app, ["ingest", "--dataset", str(src), "--columns", "prompt=q,response=text", "-o", str(out)]
    )
    assert bad.exit_code == 2 and "has no column text (its columns: q, a)" in bad.output
    no_response = CliRunner().invoke(app, ["ingest", "--dataset", str(src), "--columns", "prompt=q", "-o", str(out)])
    assert no_response.exit_code == 2 and "map response" in no_response.output
