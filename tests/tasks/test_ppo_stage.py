"""The PPO task reads the settings the user set (holdout, align, reward model) and registers the adapter (the stage
function's resume: tests/stages/test_ppo.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from t2g_core.config import AlignConfig, HoldoutConfig
from t2g_core.config.stages import PPOSettings
from tests.core._ppo_small import SMALL


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
