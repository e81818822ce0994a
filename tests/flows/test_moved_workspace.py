"""A workspace folder moved elsewhere (``mv t2g-workspace ~/runs/``) keeps its cache: the cached references and the
dataset pointer file name files in the old folder, and are read with their paths in the new place."""

from __future__ import annotations

from pathlib import Path

import pytest

from t2g_core.config import load_config
from tests.flows.test_resume import _task_states

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.slow]
SMALL = ["data.n_items=12", "data.seed=5", "checks.small_tagger_data=true"]


def test_a_moved_workspace_reuses_its_cache_and_its_dataset_versions(tmp_path, monkeypatch):
    from flows import stages

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    before, after = tmp_path / "before" / "ws", tmp_path / "after" / "ws"
    cfg = load_config(None, [f"workspace.root={before}", *SMALL])
    stages.annotate(cfg, stages.feedback(cfg))  # also records the datasets' first versions
    before.parent.rename(tmp_path / "after")

    moved = load_config(None, [f"workspace.root={after}", *SMALL])
    feedback = stages.feedback(moved, return_state=True)
    assert _task_states(feedback.state_details.flow_run_id) == {"feedback": ["Cached"]}
    ref = feedback.result()
    assert Path(ref.path).is_relative_to(after) and Path(ref.data_path).is_file()
    # a changed setting re-runs annotation, which reads the cached feedback's files
    again = load_config(None, [f"workspace.root={after}", *SMALL, "annotate.max_failure_rate=0.5"])
    annotations = stages.annotate(again, ref)
    assert Path(annotations.path).is_relative_to(after)
    latest = stages.feedback(load_config(None, [f"workspace.root={after}", *SMALL, "data.source=latest"]))
    assert latest.sha256 == ref.sha256 and Path(latest.path).is_relative_to(after)
    assert not (tmp_path / "before").exists()
