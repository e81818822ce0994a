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


@pytest.mark.slow
def test_each_reward_model_the_critique_loop_refreshed_is_registered_with_its_audit(
    tiny_model_dir, workspace_cfg, run_task, tmp_path
):
    """With ``ppo.critique_loop`` on, the PPO task registers every refreshed tagger as a version of the reward model,
    logged by the PPO run (alias ``refreshed`` on the last), with the ``critique_loop`` metrics of its round; the
    reward model's training rows it replays are in the run folder."""
    import mlflow

    from t2g_core.config import AnnotateConfig, PPOConfig
    from t2g_core.stages.refs import ModelsRef, RewardModelRef
    from t2g_core.workspace import Workspace
    from tasks.ppo import train_policy
    from tests.core._taggers import demo_tagger, tagger_cfg

    folder, rm_df, _ = demo_tagger(tiny_model_dir, tmp_path / "tagger", n_items=16, steps=4)
    rm_data = Workspace.at(workspace_cfg.root).store.write("rm_data", "k", rm_df, "rm_data")
    rm = RewardModelRef(model_dir=str(folder), kind="tagger", base=str(tiny_model_dir), rm_data=rm_data, digest="t")
    loop = {"enabled": True, "every": 1, "budget": 2, "refresh_steps": 1, "on_alarm": "continue"}
    ppo = PPOConfig.model_validate(SMALL.model_dump() | {"reward_source": "reward_model", "critique_loop": loop})
    settings = PPOSettings(ppo=ppo, reward_model=tagger_cfg(), annotate=AnnotateConfig(annotator="reference"))
    models = ModelsRef.of(tiny_model_dir, tiny_model_dir)
    out = run_task(train_policy, _feedback(workspace_cfg), models, rm, settings, workspace_cfg)

    assert [(m["round"], m["step"]) for m in out.reward_models] == [(0, 0), (1, 1)]
    client, name = mlflow.MlflowClient(), settings.reward_model.registered_name
    for m in out.reward_models:
        assert client.get_model_version(name, m["version"]).run_id == out.run_id
        assert m["metrics"]["annotated"] == 2.0 and "f1" in m["metrics"] and "refresh_loss" in m["metrics"]
    assert str(client.get_model_version_by_alias(name, "refreshed").version) == out.reward_models[-1]["version"]
    assert (Path(out.run_dir) / "critique_loop" / "replay_rm_data.parquet").exists()
