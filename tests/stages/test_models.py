"""The models stage: named models pass through with their content digests; the tiny demo models are built once per
key (configuration and data) and found again."""

from __future__ import annotations

from pathlib import Path

from t2g_core.config import ModelsConfig
from t2g_core.config.stages import ModelsSettings
from t2g_core.models.tiny import SIZES, TinySpec
from t2g_core.stages import models
from t2g_core.stages.refs import ModelsRef


def test_named_models_pass_through_with_their_digests(tiny_model_dir, demo_feedback, stage_ctx):
    fb = demo_feedback(4)
    settings = ModelsSettings(models=ModelsConfig(policy=str(tiny_model_dir), reward_model_base=str(tiny_model_dir)))
    ctx = stage_ctx("models", feedback=fb, settings=settings)
    ref = models.build(fb, settings, ctx)
    assert ref == ModelsRef.of(tiny_model_dir, tiny_model_dir)
    assert ref.policy_digest == ref.base_digest and len(ref.policy_digest) == 64
    assert ctx.tracker.inputs == [("feedback", "training")] and ctx.tracker.artifacts == []  # nothing was built


def test_the_key_follows_the_models_settings(tiny_model_dir, demo_feedback, key_of):
    fb = demo_feedback(4)
    named = ModelsSettings(models=ModelsConfig(policy=str(tiny_model_dir)))
    assert key_of("models", feedback=fb, settings=named) == key_of(
        "models", feedback=fb, settings=ModelsSettings(models=ModelsConfig(policy=str(tiny_model_dir)))
    )
    assert key_of("models", feedback=fb, settings=named) != key_of("models", feedback=fb, settings=ModelsSettings())
    assert key_of("models", feedback=fb, settings=named) != key_of("models", feedback=demo_feedback(5), settings=named)


def test_tiny_models_are_built_once_per_key(demo_feedback, stage_ctx, monkeypatch):
    """No warm start (0 steps): the tokenizer, the base and the policy folders, built then found again."""
    fb = demo_feedback(8)
    tiny = TinySpec(vocab_size=256, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2, warm_start_steps=0)
    tiny = tiny.model_copy(update={"policy_sft_steps": 0, "policy_noise_steps": 0, "policy_sft_examples": 8})
    monkeypatch.setitem(SIZES, "smoke", tiny)  # the stage builds the named size's spec, looked up at call time
    settings = ModelsSettings(models=ModelsConfig(tiny="smoke"))
    ctx = stage_ctx("models", feedback=fb, settings=settings)
    ref = models.build(fb, settings, ctx)
    built = Path(ref.policy).parent
    assert built.parent == ctx.workspace.models / ctx.key and Path(ref.base) == built / "base"
    assert ctx.tracker.artifacts == [built / "build.json"]
    stamp = (built / "build.json").stat().st_mtime_ns
    again = models.build(fb, settings, stage_ctx("models", feedback=fb, settings=settings))
    assert again == ref and (built / "build.json").stat().st_mtime_ns == stamp  # found, not rebuilt
