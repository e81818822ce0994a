"""The reward-model stage: ``build_data`` writes rm_data under the stage key (and says why when no training row is
left); ``train`` runs data, fine-tuning and held-out evaluation and returns what a registry needs, for both kinds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t2g_core.config import AnnotateConfig, RewardModelConfig
from t2g_core.config.stages import RewardModelSettings
from t2g_core.stages import reward_model
from t2g_core.stages.refs import ModelsRef
from t2g_core.store import MANIFEST, read_artifact
from t2g_core.workspace import Workspace

SMALL = {"max_steps": 1, "batch_size": 4, "val_fraction": 0.3, "max_new_tokens": 8, "eval_max_items": 2}


@pytest.fixture
def annotated(tmp_path):
    """12 demo summaries and their reference-critic annotations, as workspace artifacts."""
    from t2g_core.annotators import annotate
    from t2g_core.demo import make_demo_feedback

    fb = make_demo_feedback("summarization", 12, seed=5)
    ann = annotate(fb, AnnotateConfig(annotator="reference"), progress=False).frame
    store = Workspace.at(tmp_path / "ws").store
    return store.write("feedback", "fb", fb, "feedback"), store.write("annotations", "ann", ann, "annotations")


def test_build_data_splits_by_item_and_records_its_statistics(annotated, tiny_model_dir, stage_ctx):
    fb, ann = annotated
    settings = RewardModelSettings(reward_model=RewardModelConfig(val_fraction=0.25))
    ctx = stage_ctx("reward_model", feedback=fb, annotations=ann, settings=settings)
    ref = reward_model.build_data(fb, ann, None, str(tiny_model_dir), settings, ctx)
    rows = read_artifact(ref.path, "rm_data")
    assert ref.path == str(ctx.workspace.artifacts / "rm_data" / ctx.key) and len(rows) == 12
    assert set(rows["split"]) == {"train", "validation"} and rows.groupby("id")["split"].nunique().max() == 1
    stats = json.loads((Path(ref.path) / MANIFEST).read_text())["extra"]["stats"]
    assert stats["n_train"] + stats["n_validation"] == stats["n_items"] == 12
    assert ctx.tracker.inputs == [("annotations", "annotation"), ("rm_data", "training")]


def test_no_training_row_is_a_clear_error(annotated, tiny_model_dir, stage_ctx):
    fb, ann = annotated
    settings = RewardModelSettings(reward_model=RewardModelConfig(max_target_tokens=16))
    with pytest.raises(ValueError, match="no training rows from 12 items.*max_target_tokens"):
        reward_model.build_data(fb, ann, None, str(tiny_model_dir), settings, stage_ctx("reward_model"))


def test_the_start_model_and_the_key_follow_the_settings(annotated, tiny_model_dir, tmp_path, key_of):
    fb, ann = annotated
    models = ModelsRef(base="base", policy="policy", base_digest="b", policy_digest="p")
    policy_start = RewardModelSettings(reward_model=RewardModelConfig(init_from="policy"))
    assert reward_model.start_model(models, policy_start) == "policy"
    base_start = RewardModelSettings(reward_model=RewardModelConfig(init_from="reward_model_base"))
    assert reward_model.start_model(models, base_start) == "base"

    def key(settings, models=models):
        return key_of("reward_model", feedback=fb, annotations=ann, models=models, settings=settings)

    assert key(RewardModelSettings()) == key(RewardModelSettings(reward_model=RewardModelConfig()))
    assert key(base_start) != key(policy_start)
    assert key(RewardModelSettings()) != key(RewardModelSettings(), ModelsRef.of(tiny_model_dir, tiny_model_dir))


def test_a_failed_validation_trains_nothing(annotated, stage_ctx, tmp_path):
    from t2g_core.stages.refs import ValidationRef

    fb, ann = annotated
    failed = ValidationRef(status="fail", report="r.md", chart="c.png", json_path="r.json")
    models = ModelsRef(base="base", policy="policy", base_digest="b", policy_digest="p")
    with pytest.raises(ValueError, match=r"validation failed \(r.md\)"):
        reward_model.train(fb, ann, None, failed, models, RewardModelSettings(), stage_ctx("reward_model"))
    assert not (tmp_path / "ws" / "checkpoints" / "reward_model").exists()
    assert not (tmp_path / "ws" / "artifacts" / "rm_data").exists()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tagger", "generative"])
def test_train_fits_evaluates_and_returns_what_a_registry_needs(annotated, tiny_model_dir, stage_ctx, kind):
    fb, ann = annotated
    models = ModelsRef.of(tiny_model_dir, tiny_model_dir)
    settings = RewardModelSettings(reward_model=RewardModelConfig(kind=kind, **SMALL))
    ctx = stage_ctx("reward_model", feedback=fb, annotations=ann, models=models, settings=settings)
    ref = reward_model.train(fb, ann, None, None, models, settings, ctx)
    assert ref.kind == kind and ref.base == str(tiny_model_dir) and ref.global_step == 1
    assert Path(ref.model_dir).is_relative_to(ctx.workspace.root / "checkpoints" / "reward_model" / ctx.key)
    assert ref.rm_data.path == str(ctx.workspace.artifacts / "rm_data" / ctx.key)
    assert Path(ref.report).read_text().startswith("# Reward model evaluation") and ref.metrics
    assert len(ref.digest) == 64 and ref.version is None  # registering is the tracking layer's job
    logged = {k for _, m in ctx.tracker.metrics for k in m}
    assert "rm_train.seconds" in logged and {f"rm_eval.{k}" for k in ref.metrics} <= logged
