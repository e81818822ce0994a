"""`t2g data demo`: demo feedback written where asked, loadable, and an unknown task refused."""

from __future__ import annotations

from t2g_core.demo import make_demo_feedback


def test_cli_writes_loadable_demo_feedback(tmp_path):
    from typer.testing import CliRunner

    from t2g_cli import app
    from t2g_core.feedback import load_feedback

    out = tmp_path / "fb.parquet"
    result = CliRunner().invoke(
        app, ["data", "demo", "--task", "summarization", "--n", "12", "--seed", "4", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    loaded, made = load_feedback(out), make_demo_feedback("summarization", 12, seed=4)
    for col in ("id", "prompt", "response", "reference", "meta"):
        assert loaded[col].tolist() == made[col].tolist()
    assert loaded["critique"].isna().all()
    bad = CliRunner().invoke(app, ["data", "demo", "--task", "poems", "-o", str(tmp_path / "x.parquet")])
    assert bad.exit_code != 0 and "unknown demo task" in bad.output
