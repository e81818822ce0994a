"""The placed or inline PPO and warm-up groups as the Prefect UI runs them: ``layout.<stage>`` of 2 processes reaches
the task, which starts the gang (``accelerate launch``, DDP over gloo on the CPU) and equals the same stage in 1
process; the cached result is found again with the layout removed (it is in no cache key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from t2g_core.config import PipelineConfig, WorkspaceConfig
from tests.core._ppo_small import SMALL


def _inputs(root, model_dir, monkeypatch, items: int):
    """A workspace at ``root``, its demo feedback of ``items`` and the tiny models, one thread a rank."""
    from t2g_core.demo import make_demo_feedback
    from t2g_core.stages.refs import ModelsRef
    from t2g_core.workspace import Workspace

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    workspace = WorkspaceConfig(root=str(root))
    feedback = Workspace.at(workspace.root).store.write(
        "feedback", "k", make_demo_feedback("summarization", items), "feedback"
    )
    return workspace, feedback, ModelsRef.of(model_dir, model_dir)


@pytest.mark.slow
def test_the_ppo_flow_in_two_processes_equals_one_process_and_its_cache_ignores_the_layout(
    tmp_path, prefect_harness, tiny_model_dir, monkeypatch, live_ranks
):
    """The adapter's weights, the metrics, the stage key and rank 0's progress and MLflow metrics of the 2-process
    stage are those of 1 process; the cached result is found again with the layout removed."""
    import mlflow

    from flows import stages
    from tasks.progress import PrefectProgress

    calls = []
    monkeypatch.setattr(PrefectProgress, "__call__", lambda self, phase, done, total, metrics=None: calls.append(done))
    workspace, feedback, models = _inputs(tmp_path / "one", tiny_model_dir, monkeypatch, 40)
    one = stages.ppo(PipelineConfig(ppo=SMALL, workspace=workspace), feedback, models, None)
    workspace, feedback, models = _inputs(tmp_path / "two", tiny_model_dir, monkeypatch, 40)
    gang = PipelineConfig(ppo=SMALL, workspace=workspace, layout={"ppo": {"processes": 2}})
    two = stages.ppo(gang, feedback, models, None)
    assert Path(one.run_dir).name == Path(two.run_dir).name  # the stage key (so the cache key) ignores the layout
    assert json.loads((Path(two.run_dir) / "models.json").read_text())["processes"] == 2
    assert list(Path(workspace.root, "gang").glob("ppo-*/rank-1.log")) and not live_ranks(workspace)
    a = load_file(str(Path(one.adapter_dir) / "adapter_model.safetensors"))
    b = load_file(str(Path(two.adapter_dir) / "adapter_model.safetensors"))
    assert any(float(v.abs().sum()) > 0 for k, v in a.items() if "lora_B" in k)
    for k in a:  # tolerance as in tests/core/test_ppo_distributed.py (summation order under Adam's first steps)
        assert torch.allclose(a[k], b[k], atol=2e-3), (k, float((a[k] - b[k]).abs().max()))
    shared = [k for k in one.metrics if not k.startswith(("time/", "perf/")) and "per_s" not in k]
    assert shared and {k: pytest.approx(one.metrics[k], abs=1e-5) for k in shared} == {
        k: two.metrics[k] for k in shared
    }
    assert two.run_id and two.version == "1" and two.steps == one.steps  # registered like a one-process run
    assert {m.step for m in mlflow.MlflowClient().get_metric_history(two.run_id, "kl/mean")} >= {0, 1}  # rank 0
    assert calls == [1, 2, 1, 2]  # rank 0's progress reached the task's progress as in one process

    again = stages.ppo(gang.model_copy(update={"layout": PipelineConfig().layout}), feedback, models, None)
    assert again.run_dir == two.run_dir and again.version == "1"  # cached: not trained or registered again


@pytest.mark.slow
def test_the_warmup_flow_in_two_processes_equals_one_process_and_its_cache_ignores_the_layout(
    tmp_path, prefect_harness, tiny_model_dir, monkeypatch, live_ranks
):
    """``layout.warmup`` reaches the warm-up task as ``layout.ppo`` reaches PPO's (``layout.reward_model`` is passed by
    the same line of ``flows/stages.py``): the trained weights, the losses and rank 0's MLflow metrics of the
    2-process stage are those of 1 process (the gradient all-reduce sums in another order: measured 7e-9)."""
    from mlflow import MlflowClient

    from flows import stages

    def losses(ref) -> list[tuple[int, float]]:  # in the store the last stage run configured
        return sorted((m.step, m.value) for m in MlflowClient().get_metric_history(ref.run_id, "warmup/loss"))

    warmup = {"enabled": True, "steps": 4, "batch_size": 4, "learning_rate": 5e-3, "save_steps": 2, "lora": {"r": 4}}
    workspace, feedback, models = _inputs(tmp_path / "one", tiny_model_dir, monkeypatch, 24)
    one = stages.warmup(PipelineConfig(warmup=warmup, workspace=workspace), feedback, models)
    one_loss = losses(one)
    workspace, feedback, models = _inputs(tmp_path / "two", tiny_model_dir, monkeypatch, 24)
    gang = PipelineConfig(warmup=warmup, workspace=workspace, layout={"warmup": {"processes": 2}})
    two = stages.warmup(gang, feedback, models)
    assert Path(one.policy).parent.name == Path(two.policy).parent.name  # the stage key ignores the layout
    assert list(Path(workspace.root, "gang").glob("warmup-*/rank-1.log")) and not live_ranks(workspace)
    a, b = (load_file(str(Path(ref.policy) / "model.safetensors")) for ref in (one, two))
    start = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    assert any(not torch.equal(a[k], start[k]) for k in a)  # it trained (the LoRA merged into the weights)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-5)
    meta = [json.loads((Path(ref.policy) / "warmup.json").read_text()) for ref in (one, two)]
    assert meta[0]["global_step"] == meta[1]["global_step"] == 4
    assert meta[1]["losses"] == pytest.approx(meta[0]["losses"], rel=1e-5)
    two_loss = losses(two)  # rank 0 logged to the stage's run as one process does
    assert [s for s, _ in two_loss] == [s for s, _ in one_loss] == [1, 2, 3, 4]
    assert [v for _, v in two_loss] == pytest.approx([v for _, v in one_loss], rel=1e-5)

    again = stages.warmup(gang.model_copy(update={"layout": PipelineConfig().layout}), feedback, models)
    assert again.policy == two.policy and again.run_id == two.run_id  # cached: not trained again
