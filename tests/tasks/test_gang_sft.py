"""The stages that train through TRL's ``SFTTrainer`` (``t2g_core/sft.py``), the warm-up and the generative reward
model, run as a gang of 2 processes (``layout.<stage>``, DDP over gloo on the CPU) and equal the same stage in 1
process: the trained weights, the stage's metrics, the stage key (the warm-up's through the flow, where a killed rank
fails the stage with its error and the next run resumes: tests/flows/test_gang_flow.py). The Trainer is refused if it
would leave each rank alone; a step's examples are shared by the processes, never multiplied; the tagger, trained by
a loop of its own, refuses a layout of several processes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from t2g_core.config import RewardModelConfig, WarmupConfig
from t2g_core.config.orchestration import Layout
from t2g_core.config.stages import RewardModelSettings
from tests.core._launch import accelerate_launch

ROOT = Path(__file__).resolve().parents[2]
TWO = Layout(processes=2)
RM = RewardModelConfig(  # LoRA dropout 0: each process draws its own masks, with which 2 equal 1 only in distribution
    kind="generative",
    val_fraction=0.3,
    max_steps=3,  # 12 of the 25 training rows: within the first epoch (its last batch is filled up across processes)
    save_steps=2,
    batch_size=4,
    learning_rate=5e-2,
    lora={"r": 4, "alpha": 8, "dropout": 0.0},
    max_new_tokens=16,
    eval_max_items=4,
    registered_name="rm-gang",
)
TIMINGS = ("gen_tokens_per_s", "gen_seconds", "score_ms_per_item")
ATOL = 1e-5  # the gradient all-reduce sums in another order: measured 7e-9 (warm-up) and 2e-7 (reward model)


def _feedback(workspace, n: int = 24):
    from t2g_core.demo import make_demo_feedback
    from t2g_core.workspace import Workspace

    df = make_demo_feedback("summarization", n, seed=5)
    return Workspace.at(workspace.root).store.write("feedback", "k", df, "feedback"), df


def _history(run_id: str, metric: str) -> list[tuple[int, float]]:
    """A metric of a run in the store the last stage run configured."""
    from mlflow import MlflowClient

    return sorted((m.step, m.value) for m in MlflowClient().get_metric_history(run_id, metric))


def _timed(name: str, run):
    started = time.monotonic()
    ref = run()
    print(f"{name}: {time.monotonic() - started:.1f} s")
    return ref


@pytest.mark.slow
def test_the_generative_reward_model_in_two_processes_equals_one_process(
    tiny_model_dir, fresh_workspace, live_ranks, run_task, tmp_path, gloo
):
    from t2g_core.annotators import annotate
    from t2g_core.config import AnnotateConfig
    from t2g_core.stages.refs import ModelsRef
    from t2g_core.workspace import Workspace
    from tasks.reward_model import train_reward_model

    def train(workspace, layout):
        feedback, df = _feedback(workspace, 40)
        labels = annotate(df, AnnotateConfig(annotator="reference"), progress=False).frame
        annotations = Workspace.at(workspace.root).store.write("annotations", "k", labels, "annotations")
        models, settings = ModelsRef.of(tiny_model_dir, tiny_model_dir), RewardModelSettings(reward_model=RM)
        inputs = (feedback, annotations, None, None, models, settings, workspace)
        return run_task(train_reward_model, *inputs, layout=layout)

    one_ws, two_ws = fresh_workspace(tmp_path / "one"), fresh_workspace(tmp_path / "two")
    one = _timed("1-process reward-model stage", lambda: train(one_ws, None))
    one_loss = _history(one.run_id, "rm/loss")
    two = _timed("2-process reward-model stage", lambda: train(two_ws, TWO))
    assert Path(one.model_dir).parent.name == Path(two.model_dir).parent.name  # the stage key ignores the layout
    assert one.rm_data.sha256 == two.rm_data.sha256 and one.global_step == two.global_step == 3
    a, b = (load_file(str(Path(ref.model_dir) / "adapter_model.safetensors")) for ref in (one, two))
    assert any(float(v.abs().sum()) > 0 for k, v in a.items() if "lora_B" in k)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=ATOL)
    shared = {k: v for k, v in one.metrics.items() if k not in TIMINGS}
    assert shared and {k: pytest.approx(v, abs=1e-6) for k, v in shared.items()} == {k: two.metrics[k] for k in shared}
    assert two.version == "1" and Path(two.report).is_file()  # evaluated and registered as in one process
    two_loss = _history(two.run_id, "rm/loss")
    assert [s for s, _ in two_loss] == [s for s, _ in one_loss] == [1, 2, 3]
    assert [v for _, v in two_loss] == pytest.approx([v for _, v in one_loss], rel=1e-5)
    assert not live_ranks(two_ws)


TRAINER_FORGETS_CPU = """
import sys
import trl
from t2g_cli._common import join_processes
join_processes(2)
config = trl.SFTConfig  # the Trainer's own accelerate state, set up again without cpu=True: each rank alone
trl.SFTConfig = lambda **kwargs: config(**{**kwargs, "use_cpu": False})
from t2g_core.config import WarmupConfig
from t2g_core.sft import sft_trainer
rows = {"prompt": ["a b"] * 4, "completion": ["c"] * 4}
sft_trainer(WarmupConfig(), sys.argv[1], sys.argv[2], rows, section="warmup", dtype=None, lora=True)
"""


@pytest.mark.slow
def test_a_trainer_that_would_leave_each_rank_alone_is_refused(tiny_model_dir, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("the trap is that of a host without CUDA")
    script = tmp_path / "rank.py"
    script.write_text(TRAINER_FORGETS_CPU)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [*accelerate_launch(2), str(script), str(tiny_model_dir), str(tmp_path / "out")]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode != 0
    assert "RuntimeError: 2 processes joined but the Trainer runs 1" in proc.stderr


def test_a_steps_examples_are_shared_by_the_processes_never_multiplied():
    from t2g_core.sft import per_process

    assert per_process(WarmupConfig(batch_size=4, grad_accum=1), "warmup", 2) == (2, 1)  # the batch split
    assert per_process(WarmupConfig(batch_size=4, grad_accum=8), "warmup", 8) == (4, 1)  # the accumulation first
    assert per_process(RewardModelConfig(batch_size=1, grad_accum=1), "reward_model", 1) == (1, 1)
    with pytest.raises(ValueError, match="make reward_model.grad_accum or reward_model.batch_size a multiple of 8"):
        per_process(RewardModelConfig(batch_size=12, grad_accum=1), "reward_model", 8)


def test_the_tagger_refuses_a_layout_of_several_processes(tmp_path, monkeypatch):
    """The span tagger trains in a loop of its own, without DDP: in each of several processes it would train the
    whole model alone (the same work repeated, every process writing it), so the stage says which setting to change."""
    import t2g_core.ppo.distributed
    from t2g_core.stages import reward_model
    from t2g_core.stages.context import StageContext

    monkeypatch.setattr(t2g_core.ppo.distributed, "rank_and_world", lambda: (0, 2))
    settings = RewardModelSettings(reward_model=RewardModelConfig(kind="tagger"))
    with pytest.raises(ValueError, match="kind=tagger trains in one process.*set layout.reward_model.processes to 1"):
        reward_model.fit(None, "base", settings, StageContext.keyed(tmp_path, "k"))


def test_the_run_form_refuses_the_tagger_in_several_processes_before_anything_starts():
    """The same refusal at the form (``t2g_core.config.checks``), before a gang is launched to refuse it."""
    from pydantic import ValidationError

    from t2g_core.config import PipelineConfig

    layout = {"reward_model": {"processes": 2}}
    with pytest.raises(ValidationError, match="layout.reward_model runs 2 processes, and reward_model.kind=tagger"):
        PipelineConfig(reward_model={"kind": "tagger"}, layout=layout)
    assert PipelineConfig(reward_model={"kind": "generative"}, layout=layout).layout.of("reward_model").world == 2
