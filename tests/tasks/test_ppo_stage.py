"""The PPO stage reads the settings the user set (holdout, align, reward model), registers the adapter, and a run
that finds its checkpoint resumes from it and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from t2g_core.config import AlignConfig, HoldoutConfig, PPOConfig
from t2g_core.config.stages import PPOSettings

SMALL = PPOConfig(
    reward_source="oracle",
    steps=2,
    batch_size=4,
    minibatches=2,
    ppo_epochs=1,
    max_new_tokens=8,
    value_model="head",
    save_every=1,
    eval_every=1,
    log_every=1,
)


def _feedback(workspace_cfg):
    from t2g_core.demo import make_demo_feedback
    from t2g_core.workspace import Workspace

    return Workspace.at(workspace_cfg.root).store.write(
        "feedback", "k", make_demo_feedback("summarization", 40), "feedback"
    )


@pytest.mark.slow
def test_ppo_reads_holdout_and_align_and_registers_the_policy(tiny_model_dir, workspace_cfg, run_task):
    """Before: the task rebuilt a config from the ppo section alone; 10 of 40 prompts were held out whatever the user
    set, and align.positive_value=2.0 arrived as 1.0."""
    import mlflow

    from t2g_core.stages.refs import ModelsRef
    from tasks.ppo import POLICY_MODEL, train_policy

    settings = PPOSettings(
        ppo=SMALL, holdout=HoldoutConfig(eval_fraction=0.5), align=AlignConfig(positive_value=2.0, negative_value=-3.0)
    )
    out = run_task(
        train_policy,
        _feedback(workspace_cfg),
        ModelsRef.of(tiny_model_dir, tiny_model_dir),
        None,
        settings,
        workspace_cfg,
    )
    run_dir = Path(out.run_dir)
    assert (
        len(pd.read_parquet(run_dir / "eval.parquet")) == 20 and len(pd.read_parquet(run_dir / "prompts.parquet")) == 20
    )
    recorded = json.loads((run_dir / "run.json").read_text())["config"]
    assert recorded["align"]["positive_value"] == 2.0 and recorded["holdout"]["eval_fraction"] == 0.5
    assert out.version == "1" and out.run_id
    assert out.reward["source"] == "oracle" and 0 < out.reward["score_share"] < 1  # what the reward came from
    assert mlflow.MlflowClient().get_model_version(POLICY_MODEL, "1").run_id == out.run_id


@pytest.mark.slow
def test_a_run_that_finds_its_checkpoint_resumes_and_says_from_where(tiny_model_dir, tmp_path):
    from t2g_core.stages import ppo
    from t2g_core.stages.context import StageContext
    from t2g_core.stages.refs import ModelsRef
    from t2g_core.workspace import Workspace

    feedback = Workspace.at(tmp_path).store.write("feedback", "k", _demo(), "feedback")
    settings, models = (
        PPOSettings(ppo=SMALL.model_copy(update={"steps": 3})),
        ModelsRef.of(tiny_model_dir, tiny_model_dir),
    )
    lines: list[str] = []
    ctx = StageContext.keyed(tmp_path, "run", log=lines.append)
    first = ppo.train(feedback, models, None, settings, ctx)
    assert first.steps == 3 and not lines
    checkpoints = Path(first.run_dir) / "checkpoints"
    (checkpoints / "latest").write_text("step-000002")  # as if killed after step 2 was saved
    again = ppo.train(feedback, models, None, settings, ctx)
    assert lines == [f"PPO resumes from step-000002 of 3 steps ({first.run_dir})"]
    assert again.steps == 3 and json.loads(Path(again.history_path).read_text())[-1]["step"] == 2
    forced = ppo.train(
        feedback, models, None, settings, StageContext.keyed(tmp_path, "run", force=True, log=lines.append)
    )
    assert len(lines) == 1 and forced.steps == 3  # forced: trained afresh, no resume


def _demo():
    from t2g_core.demo import make_demo_feedback

    return make_demo_feedback("summarization", 12)
