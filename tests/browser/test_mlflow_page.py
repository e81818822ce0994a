"""The MLflow UI (headless Chromium) opens the pipeline's links on runs and models, the model-training view, not
MLflow 3's GenAI overview (traces, token cost); the experiment is marked as model training."""

from __future__ import annotations

import time

import pytest
from chromium_cdp import Browser
from local_servers import mlflow_server

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]


def test_the_printed_link_opens_the_runs_of_a_model_training_experiment(tmp_path, chromium):
    from t2g_core.config import WorkspaceConfig
    from t2g_mlflow import experiment, runs

    experiment.create_store(f"sqlite:///{tmp_path / 'mlflow.db'}")  # as deployments/up.sh, before its server starts
    with mlflow_server(tmp_path / "mlflow.db") as url:
        ws = WorkspaceConfig(root=str(tmp_path / "ws"), mlflow_tracking_uri=url)
        with runs.stage_run("feedback", {"n": 1}, ws) as run:
            run_id = run.info.run_id
        exp_id = experiment.configure(ws)
        import mlflow

        assert (
            mlflow.MlflowClient(url).get_experiment(exp_id).tags["mlflow.experimentKind"] == "custom_model_development"
        )
        link = experiment.run_url(run_id, exp_id, ws).replace(f"/runs/{run_id}", "/runs")
        (tmp_path / "profile").mkdir()
        browser = Browser(chromium, tmp_path / "profile", timeout=90)
        try:
            browser.open(link, tmp_path)
            browser.wait_for("document.body.innerText.includes('feedback')")
            where = browser.eval("location.href")
            nav = browser.eval("Array.from(document.querySelectorAll('nav a')).map(a => a.innerText.trim())")
            time.sleep(1)
            browser.screenshot(tmp_path / "experiment.png")
        finally:
            browser.close()
    assert "/overview" not in where and f"/experiments/{exp_id}/runs" in where, where
    assert "Runs" in nav and "Models" in nav, nav
