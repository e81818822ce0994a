"""`t2g demo`, `t2g run` and the UI form start from one set of defaults."""

from __future__ import annotations

from t2g_core.config import PipelineConfig


def test_demo_ui_form_and_cli_share_one_set_of_defaults(tmp_path, monkeypatch):
    """`t2g demo`, `t2g run` and the UI form all start from PipelineConfig's defaults (the demo used to add sampled
    evaluation that the form did not have)."""
    from typer.testing import CliRunner

    import t2g_cli.run as run_cmd
    from t2g_cli import app

    seen = []
    monkeypatch.setattr(run_cmd, "_run_pipeline", lambda cfg, refresh: seen.append(cfg) or ({}, {}))
    monkeypatch.setattr(run_cmd, "_print_summary", lambda *a: None)
    for args in (["demo", "-w", str(tmp_path)], ["run", "-w", str(tmp_path)]):
        assert CliRunner().invoke(app, args).exit_code == 0
    default = PipelineConfig.model_validate({"workspace": {"root": str(tmp_path.resolve())}})
    assert seen == [default, default]
    import importlib.util
    from pathlib import Path

    serve_py = Path(__file__).resolve().parents[2] / "deployments" / "serve.py"
    spec = importlib.util.spec_from_file_location("serve", serve_py)
    serve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve)
    assert serve.form_defaults(str(tmp_path)) == {"workspace": default.workspace.model_dump(mode="json")}
    assert default.evaluate.sampling.temperature > 0  # the demo's sampled evaluation is everyone's default
