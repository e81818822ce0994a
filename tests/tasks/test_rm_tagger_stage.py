"""The reward-model task trains a span tagger from the policy, evaluates it against the demo's truth and registers
it in MLflow as a span-tagger model."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.slow
def test_the_stage_trains_a_tagger_from_the_policy_and_registers_it(tiny_model_dir, workspace_cfg, run_task):
    import torch
    from mlflow import MlflowClient

    from t2g_core.annotators import annotate
    from t2g_core.config import AnnotateConfig, RewardModelConfig
    from t2g_core.config.stages import RewardModelSettings
    from t2g_core.demo import make_demo_feedback
    from t2g_core.reward_model.scoring import load_scorer
    from t2g_core.reward_model.tagger import TaggerScorer
    from t2g_core.stages.refs import ModelsRef
    from t2g_core.store import artifact_key
    from t2g_core.workspace import Workspace
    from tasks.reward_model import train_reward_model

    torch.set_num_threads(1)
    store = Workspace.at(workspace_cfg.root).store
    fb = make_demo_feedback("summarization", 16, seed=5)
    ann = annotate(fb, AnnotateConfig(annotator="reference"), progress=False).frame
    fb_ref = store.write("feedback", artifact_key("feedback", None, {"t": "t"}), fb, "feedback")
    ann_ref = store.write("annotations", artifact_key("annotations", None, {"t": "t"}), ann, "annotations")
    cfg = RewardModelConfig(
        kind="tagger",
        finetune="full",
        learning_rate=3e-3,
        batch_size=4,
        max_steps=3,
        val_fraction=0.3,
        registered_name="tagger-test",
    )
    models = ModelsRef.of("/nonexistent/base", tiny_model_dir)  # the tagger starts from the policy
    settings = RewardModelSettings(reward_model=cfg)
    ref = run_task(train_reward_model, fb_ref, ann_ref, None, None, models, settings, workspace_cfg)
    assert ref.kind == "tagger" and ref.base == str(tiny_model_dir) and ref.version == "1"
    assert {"span_f1", "truth_poor_char_f1", "truth_recall_invented", "score_ms_per_item"} <= ref.metrics.keys()
    assert Path(ref.model_dir, "tagger.json").exists() and Path(ref.report).read_text().startswith("# Reward model")
    assert isinstance(load_scorer(ref.model_dir, cfg), TaggerScorer)
    client = MlflowClient()
    version = client.get_model_version("tagger-test", "1")
    assert "rm_eval.truth_poor_char_f1" in client.get_run(version.tags["source_run_id"]).data.metrics
    assert client.get_logged_model(version.source.removeprefix("models:/")).model_type == "span-tagger"
