"""`t2g rm score` loads the reward model in the configured ``models.dtype``."""

from __future__ import annotations

import torch

from tests.core._load_spy import _Loads


def test_t2g_rm_score_loads_the_reward_model_in_the_configured_dtype(tiny_model_dir, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from t2g_cli import app
    from t2g_core.demo import make_demo_feedback
    from t2g_core.schemas import FEEDBACK
    from t2g_core.store import write_parquet

    loads = _Loads().install(monkeypatch)
    write_parquet(make_demo_feedback("summarization", 2), tmp_path / "fb.parquet", FEEDBACK)
    sets = ["models.dtype=bfloat16", "reward_model.max_new_tokens=8", f"workspace.root={tmp_path / 'ws'}"]
    args = ["rm", "score", str(tmp_path / "fb.parquet"), "-m", str(tiny_model_dir), "-o", str(tmp_path / "out.jsonl")]
    result = CliRunner().invoke(app, [*args, *(a for s in sets for a in ("--set", s))])
    assert result.exit_code == 0, result.output
    assert [(c, d) for c, d, _ in loads.calls] == [("t2g_core.reward_model.scoring.load_reward_model", torch.bfloat16)]
