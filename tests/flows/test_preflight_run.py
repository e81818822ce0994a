"""`t2g run` on a user's file whose rows do not fit the annotator fails fast: exit 2, one message naming the rows
and the annotator that fits, no Prefect run, no model built; the pipeline itself (a UI run) checks before building."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from t2g_cli import app
from t2g_core.demo.critiques import make_human_feedback


@pytest.fixture
def critiques_file(tmp_path) -> Path:
    path = tmp_path / "fb.parquet"
    make_human_feedback(10, seed=5).to_parquet(path, index=False)
    return path


def test_t2g_run_on_rows_with_critiques_and_no_references_fails_fast_with_one_message(tmp_path, critiques_file):
    ws = tmp_path / "ws"
    result = CliRunner().invoke(app, ["run", "-w", str(ws), "--set", f"data.source={critiques_file}"])
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())  # the console wraps long lines
    assert out.count("error:") == 1 and "Traceback" not in out and "sandbox_error" not in out
    assert "annotate.annotator=reference needs a reference on every row, and 10 of 10 rows have none" in out
    assert "'sum-s5-00000'" in out and "use annotate.annotator=ground" in out
    assert not (ws / "models").exists() and not (ws / "artifacts").exists()  # nothing ran, nothing was built


def test_an_llm_annotator_without_an_endpoint_is_refused_before_anything_runs(tmp_path):
    result = CliRunner().invoke(app, ["run", "-w", str(tmp_path / "ws"), "--set", "annotate.annotator=llm"])
    assert result.exit_code == 2 and "set annotate.base_url" in result.output


@pytest.mark.slow
def test_the_pipeline_checks_the_rows_before_it_builds_a_model(tmp_path, critiques_file, prefect_harness, monkeypatch):
    from flows.text2grad import text2grad
    from t2g_core.config import load_config
    from t2g_core.stages.preflight import PreflightError

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = load_config(None, [f"workspace.root={tmp_path / 'ws'}", f"data.source={critiques_file}"])
    state = text2grad(config=cfg, return_state=True)
    error = state.result(raise_on_failure=False)
    assert isinstance(error, PreflightError) and "use annotate.annotator=ground" in str(error)
    assert not list((tmp_path / "ws" / "models").glob("*"))  # the workspace's folder is there, with no model in it
