"""`t2g lineage` on a store without that model fails with one clear line and exit code 2."""

from __future__ import annotations

from typer.testing import CliRunner

from t2g_cli import app


def test_lineage_of_an_unknown_version_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    result = CliRunner().invoke(app, ["lineage", "7", "--workspace", str(tmp_path)])
    assert result.exit_code == 2
    assert "no model version text2grad-policy '7'" in result.output
