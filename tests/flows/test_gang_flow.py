"""The placed or inline PPO and warm-up groups as the Prefect UI runs them: ``layout.<stage>`` of 2 processes reaches
the task, which starts the gang (``accelerate launch``, DDP over gloo on the CPU); a rank SIGKILLed at a checkpoint
fails the stage with its error, the next run resumes, and the result equals the same stage in 1 process; the cached
result is found again with the layout removed (it is in no cache key)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

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
def test_the_ppo_flow_in_two_processes_through_a_killed_rank_equals_one_process_and_its_cache_ignores_the_layout(
    tmp_path, prefect_harness, tiny_model_dir, monkeypatch, live_ranks, kill_rank_one
):
    """A killed rank fails the 2-process stage with that rank's error, and the next run resumes from the last
    checkpoint: the adapter's weights, the metrics, the stage key and rank 0's progress and MLflow metrics are those of
    1 process uninterrupted; the cached result is found again with the layout removed."""
    import mlflow

    import tasks.stage
    from flows import stages
    from tasks.progress import PrefectProgress

    calls = []
    monkeypatch.setattr(PrefectProgress, "__call__", lambda self, phase, done, total, metrics=None: calls.append(done))
    ppo = SMALL.model_copy(update={"steps": 6, "save_every": 2})
    workspace, feedback, models = _inputs(tmp_path / "one", tiny_model_dir, monkeypatch, 40)
    one = stages.ppo(PipelineConfig(ppo=ppo, workspace=workspace), feedback, models, None)
    assert calls == [1, 2, 3, 4, 5, 6]
    workspace, feedback, models = _inputs(tmp_path / "two", tiny_model_dir, monkeypatch, 40)
    gang = PipelineConfig(ppo=ppo, workspace=workspace, layout={"ppo": {"processes": 2}})
    kill_rank_one(
        workspace,
        lambda: stages.ppo(gang, feedback, models, None),
        lambda: list(Path(workspace.root).glob("checkpoints/ppo/*/checkpoints/latest")),
    )
    lines: list[str] = []  # what the task logs (rank 0's lines among them)
    monkeypatch.setattr(tasks.stage, "run_logger", lambda: SimpleNamespace(info=lines.append))
    calls.clear()
    two = stages.ppo(gang, feedback, models, None)
    (resumed,) = [int(line.split()[3].split("-")[1]) for line in lines if line.startswith("PPO resumes from step-")]
    assert calls == list(range(resumed + 1, 7))  # rank 0's progress reached the task's, from where it resumed
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
    assert two.run_id and two.version == "1" and two.steps == one.steps == 6  # registered like a one-process run
    assert {m.step for m in mlflow.MlflowClient().get_metric_history(two.run_id, "kl/mean")} >= {4, 5}  # rank 0

    again = stages.ppo(gang.model_copy(update={"layout": PipelineConfig().layout}), feedback, models, None)
    assert again.run_dir == two.run_dir and again.version == "1"  # cached: not trained or registered again


@pytest.mark.slow
def test_the_warmup_flow_in_two_processes_through_a_killed_rank_equals_one_process_and_its_cache_ignores_the_layout(
    tmp_path, prefect_harness, tiny_model_dir, monkeypatch, live_ranks, kill_rank_one
):
    """``layout.warmup`` reaches the warm-up task as ``layout.ppo`` reaches PPO's (``layout.reward_model`` is passed by
    the same line of ``flows/stages.py``); the warm-up stands for both stages that train through ``t2g_core.sft``
    (the generative reward model trains through the same Trainer and resume; only its data and evaluation, written by
    rank 0, differ). A killed rank fails the stage with its error and the next run resumes: the trained weights, the
    losses and rank 0's MLflow metrics of the 2-process stage are those of 1 process uninterrupted (the gradient
    all-reduce sums in another order: measured 7e-9). The 8 steps stay within the first epoch (36 pairs, batches of
    4): an epoch's last, partial batch is filled up across the processes, after which 2 are not 1 (docs/gpu.md)."""
    from mlflow import MlflowClient

    import tasks.stage
    from flows import stages

    def losses(ref) -> list[tuple[int, float]]:  # in the store the last stage run configured
        return sorted((m.step, m.value) for m in MlflowClient().get_metric_history(ref.run_id, "warmup/loss"))

    warmup = {"enabled": True, "steps": 8, "batch_size": 4, "learning_rate": 5e-3, "save_steps": 2, "lora": {"r": 4}}
    workspace, feedback, models = _inputs(tmp_path / "one", tiny_model_dir, monkeypatch, 48)
    one = stages.warmup(PipelineConfig(warmup=warmup, workspace=workspace), feedback, models)
    one_loss = losses(one)
    workspace, feedback, models = _inputs(tmp_path / "two", tiny_model_dir, monkeypatch, 48)
    gang = PipelineConfig(warmup=warmup, workspace=workspace, layout={"warmup": {"processes": 2}})
    checkpoints = Path(workspace.root, "checkpoints", "warmup")
    # a checkpoint both ranks finished (rank 0 writes trainer_state.json last; each rank its RNG state)
    kill_rank_one(
        workspace,
        lambda: stages.warmup(gang, feedback, models),
        lambda: [c for c in checkpoints.glob("*/checkpoints/checkpoint-*") if (c / "rng_state_1.pth").is_file()],
    )
    lines: list[str] = []  # what the task logs (rank 0's lines among them)
    monkeypatch.setattr(tasks.stage, "run_logger", lambda: SimpleNamespace(info=lines.append))
    two = stages.warmup(gang, feedback, models)
    assert any(line.startswith("warm-up: 8 steps") and "resumed from" in line for line in lines), lines
    assert Path(one.policy).parent.name == Path(two.policy).parent.name  # the stage key ignores the layout
    assert list(Path(workspace.root, "gang").glob("warmup-*/rank-1.log")) and not live_ranks(workspace)
    a, b = (load_file(str(Path(ref.policy) / "model.safetensors")) for ref in (one, two))
    start = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    assert any(not torch.equal(a[k], start[k]) for k in a)  # it trained (the LoRA merged into the weights)
    meta = [json.loads((Path(ref.policy) / "warmup.json").read_text()) for ref in (one, two)]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-5)
    assert meta[0]["global_step"] == meta[1]["global_step"] == 8 and "/checkpoint-" in meta[1]["resumed_from"]
    resumed = int(meta[1]["resumed_from"].rsplit("-", 1)[1])  # this run's losses are those after its checkpoint
    assert meta[1]["losses"] == pytest.approx(meta[0]["losses"][resumed:], rel=1e-5)
    two_loss = losses(two)  # rank 0 logged to the stage's run as one process does, from where it resumed
    assert [s for s, _ in one_loss] == list(range(1, 9)) and two_loss and two_loss[-1][0] == 8
    assert [v for _, v in two_loss] == pytest.approx([v for s, v in one_loss if s >= two_loss[0][0]], rel=1e-5)

    again = stages.warmup(gang.model_copy(update={"layout": PipelineConfig().layout}), feedback, models)
    assert again.policy == two.policy and again.run_id == two.run_id  # cached: not trained again
