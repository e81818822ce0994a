"""The placed or inline PPO and warm-up groups as the Prefect UI runs them: ``layout.<stage>`` of 2 processes reaches
the task, which starts the gang; the cached result is found again with the layout removed (it is in no cache key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t2g_core.config import PipelineConfig, WorkspaceConfig
from tests.core._ppo_small import SMALL


def _inputs(tmp_path, model_dir, monkeypatch, items: int):
    """A workspace, its demo feedback of ``items`` and the tiny models, one thread a rank."""
    from t2g_core.demo import make_demo_feedback
    from t2g_core.stages.refs import ModelsRef
    from t2g_core.workspace import Workspace

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    workspace = WorkspaceConfig(root=str(tmp_path / "ws"))
    feedback = Workspace.at(workspace.root).store.write(
        "feedback", "k", make_demo_feedback("summarization", items), "feedback"
    )
    return workspace, feedback, ModelsRef.of(model_dir, model_dir)


@pytest.mark.slow
def test_the_ppo_flow_runs_its_layout_and_its_cache_ignores_the_layout(
    tmp_path, prefect_harness, tiny_model_dir, monkeypatch
):
    from flows import stages

    workspace, feedback, models = _inputs(tmp_path, tiny_model_dir, monkeypatch, 40)
    gang = PipelineConfig(ppo=SMALL, workspace=workspace, layout={"ppo": {"processes": 2}})
    ref = stages.ppo(gang, feedback, models, None)
    assert json.loads((Path(ref.run_dir) / "models.json").read_text())["processes"] == 2
    assert ref.version == "1" and list(Path(workspace.root, "gang").glob("ppo-*/rank-1.log"))

    again = stages.ppo(gang.model_copy(update={"layout": PipelineConfig().layout}), feedback, models, None)
    assert again.run_dir == ref.run_dir and again.version == "1"  # cached: not trained or registered again


@pytest.mark.slow
def test_the_warmup_flow_runs_its_layout_and_its_cache_ignores_the_layout(
    tmp_path, prefect_harness, tiny_model_dir, monkeypatch
):
    """``layout.warmup`` reaches the warm-up task as ``layout.ppo`` reaches PPO's (``layout.reward_model`` is passed by
    the same line of ``flows/stages.py``)."""
    from flows import stages

    workspace, feedback, models = _inputs(tmp_path, tiny_model_dir, monkeypatch, 24)
    warmup = {"enabled": True, "steps": 2, "batch_size": 4, "lora": {"r": 4}}
    gang = PipelineConfig(warmup=warmup, workspace=workspace, layout={"warmup": {"processes": 2}})
    ref = stages.warmup(gang, feedback, models)
    assert Path(ref.policy, "warmup.json").is_file() and list(Path(workspace.root, "gang").glob("warmup-*/rank-1.log"))

    again = stages.warmup(gang.model_copy(update={"layout": PipelineConfig().layout}), feedback, models)
    assert again.policy == ref.policy and again.run_id == ref.run_id  # cached: not trained again
