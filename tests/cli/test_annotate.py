"""``t2g annotate`` end to end: reference and code critics on demo data, the LLM annotator against the local server."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from t2g_cli import app
from t2g_core.demo import make_demo_feedback
from t2g_core.schemas import ANNOTATIONS, validate_frame
from t2g_core.store import read_artifact
from t2g_core.testing import FakeOpenAIServer

runner = CliRunner()


def test_reference_annotator_writes_a_valid_artifact(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_demo_feedback("summarization", 12, seed=1).to_parquet("fb.parquet")
    res = runner.invoke(app, ["annotate", "fb.parquet", "-o", "ann", "--annotator", "reference", "-q"])
    assert res.exit_code == 0, res.output
    assert "items 12 (ok: 12)" in res.output and "cost 0.0000" in res.output
    path = res.output.split("annotations: ")[1].split(" (")[0]
    frame = read_artifact(path, "annotations")
    assert len(frame) == 12 and (frame["annotator"] == "reference").all()


@pytest.mark.slow  # the sandbox runs every test case of every mutant
def test_code_annotator_on_demo_items(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # seed 0: three failing programs, none with a mutant that loops (seed 4's cost a second of CPU each, 13 in all:
    # loops are the sandbox tests' subject)
    make_demo_feedback("code", 3, seed=0, verify_code=False).to_parquet("fb.parquet")
    res = runner.invoke(
        app, ["annotate", "fb.parquet", "-o", "ann.parquet", "--annotator", "code", "-q", "--concurrency", "2"]
    )
    assert res.exit_code == 0, res.output
    frame = validate_frame(pd.read_parquet("ann.parquet"), ANNOTATIONS, "ann.parquet")
    assert set(frame["status"]) == {"ok"} and frame["critique"].str.contains("test cases").all()


def test_wrong_task_for_a_critic_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_demo_feedback("qa", 2, seed=0).to_parquet("fb.parquet")
    res = runner.invoke(app, ["annotate", "fb.parquet", "-o", "a.parquet", "--annotator", "code"])
    assert res.exit_code == 2 and "row 0" in res.output and "code critic handles code" in res.output


def test_llm_annotator_counts_statuses_and_reruns_only_failed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("T2G_TEST_KEY", "sk-cli-secret")
    make_demo_feedback("summarization", 10, seed=2).to_parquet("fb.parquet")
    with FakeOpenAIServer(fault_rate=0.4, faults=("malformed",), seed=2) as server:
        args = [
            "annotate",
            "fb.parquet",
            "-o",
            "ann.parquet",
            "--annotator",
            "llm",
            "--base-url",
            server.base_url,
            "--model",
            "m",
            "-q",
            "--set",
            "annotate.api_key_env=T2G_TEST_KEY",
        ]
        first = runner.invoke(app, args)
        assert first.exit_code == 1, first.output  # 2 of 10 failed: more than annotate.max_failure_rate (5%)
        assert "parse_error" in first.output and "10 requests" in first.output and "max_failure_rate" in first.output
        n_failed = int((pd.read_parquet("ann.parquet")["status"] != "ok").sum())
        server.fault_rate = 0.0
        again = runner.invoke(app, [*args, "--only-failed"])
        assert again.exit_code == 0, again.output
        assert f"{n_failed} requests" in again.output and f"{10 - n_failed} ok items kept" in again.output
        assert set(server.auth_headers) == {"Bearer sk-cli-secret"}
    assert "sk-cli-secret" not in first.output + again.output
    assert set(pd.read_parquet("ann.parquet")["status"]) == {"ok"}


def test_llm_without_base_url_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_demo_feedback("qa", 2, seed=0).to_parquet("fb.parquet")
    res = runner.invoke(app, ["annotate", "fb.parquet", "-o", "a.parquet", "--annotator", "llm"])
    assert res.exit_code == 2 and "--base-url" in res.output
