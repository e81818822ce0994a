"""A tampered checkpoint cannot run code: PPO's ``trainer.pt`` and ``rng-rank0.pt`` (and the span tagger's
``state.pt``, tests/core/test_rm_tagger.py) are loaded with ``weights_only=True``, so a pickle payload (an object that
writes a marker file when unpickled) is refused, naming the file, on ``t2g ppo resume`` and on a pipeline resume (the
PPO stage finding its checkpoint), and the marker never appears."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t2g_cli import app
from tests.core._pickles import plant

pytestmark = pytest.mark.slow
runner = CliRunner()


def _sets(tiny_model_dir, tmp_path, steps: int) -> list[str]:
    sets = [
        f"workspace.root={tmp_path / 'ws'}",
        f"models.policy={tiny_model_dir}",
        f"models.reward_model_base={tiny_model_dir}",
        "data.n_items=8",
        "holdout.eval_fraction=0",
        f"ppo.steps={steps}",
        "ppo.batch_size=4",
        "ppo.minibatches=1",
        "ppo.ppo_epochs=1",
        "ppo.sampling.max_new_tokens=6",
        "ppo.value_model=head",
        "ppo.save_every=1",
        "ppo.reward_source=oracle",
    ]
    return [arg for s in sets for arg in ("--set", s)]


@pytest.mark.parametrize("file", ["trainer.pt", "rng-rank0.pt"])
def test_t2g_ppo_resume_refuses_a_pickle_payload(tiny_model_dir, tmp_path, file):
    run_dir, marker = tmp_path / "run", tmp_path / "marker"
    done = runner.invoke(app, ["ppo", "train", "--run-dir", str(run_dir), *_sets(tiny_model_dir, tmp_path, 1)])
    assert done.exit_code == 0, done.output
    spec = json.loads((run_dir / "run.json").read_text())
    spec["config"]["ppo"]["steps"] = 2
    (run_dir / "run.json").write_text(json.dumps(spec))
    plant(run_dir / "checkpoints" / "step-000001" / file, marker)
    resumed = runner.invoke(app, ["ppo", "resume", str(run_dir)])
    assert not marker.exists(), "unpickling the checkpoint ran the payload"
    assert resumed.exit_code != 0
    message = resumed.output + repr(resumed.exception)
    assert file in message and "refused" in message, message


def test_a_pipeline_resume_refuses_a_pickle_payload(tiny_model_dir, tmp_path):
    """The PPO stage of a retried pipeline finds its checkpoint and resumes from it: the same refusal."""
    from t2g_core.config import PPOConfig
    from t2g_core.config.stages import PPOSettings
    from t2g_core.demo import make_demo_feedback
    from t2g_core.stages import ppo
    from t2g_core.stages.context import StageContext
    from t2g_core.stages.refs import ModelsRef
    from t2g_core.training import UnsafeCheckpoint
    from t2g_core.workspace import Workspace

    feedback = Workspace.at(tmp_path).store.write("feedback", "k", make_demo_feedback("summarization", 8), "feedback")
    small = PPOConfig(
        steps=2,
        batch_size=4,
        minibatches=1,
        ppo_epochs=1,
        sampling={"max_new_tokens": 6},
        value_model="head",
        save_every=1,
        reward_source="oracle",
    )
    settings = PPOSettings(ppo=small, holdout={"eval_fraction": 0})
    models, marker = ModelsRef.of(tiny_model_dir, tiny_model_dir), tmp_path / "marker"
    ctx = StageContext.keyed(tmp_path, "run")
    first = ppo.train(feedback, models, None, settings, ctx)
    checkpoints = Path(first.run_dir) / "checkpoints"
    (checkpoints / "latest").write_text("step-000001")  # as if killed after step 1 was saved
    plant(checkpoints / "step-000001" / "trainer.pt", marker)
    with pytest.raises(UnsafeCheckpoint, match="trainer.pt: refused"):
        ppo.train(feedback, models, None, settings, ctx)
    assert not marker.exists()
