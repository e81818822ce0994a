"""The policy-samples stage: the policy PPO starts from, sampled on training prompts only and labelled by the
annotator; the reward model trains on the samples of its own training prompts (never on a held-out or validation
prompt's), and PPO's critique loop replays them with the dataset's items."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from t2g_core.config import AnnotateConfig, HoldoutConfig, PolicySamplesConfig, RewardModelConfig
from t2g_core.config.stages import PolicySamplesSettings, RewardModelSettings
from t2g_core.feedback import sampled_from
from t2g_core.reward_model.data import split_for_id
from t2g_core.stages import policy_samples, reward_model
from t2g_core.stages.io import read
from t2g_core.stages.refs import ModelsRef

HOLDOUT = HoldoutConfig(eval_fraction=0.25, seed=3)


def _settings(sampling: dict | None = None, **samples) -> PolicySamplesSettings:
    cfg = PolicySamplesConfig(
        enabled=True, sampling={"max_new_tokens": 12, **(sampling or {})}, batch_size=5, **samples
    )
    return PolicySamplesSettings(policy_samples=cfg, holdout=HOLDOUT, annotate=AnnotateConfig(annotator="reference"))


@pytest.fixture
def sampled(demo_feedback, tiny_model_dir, stage_ctx):
    fb = demo_feedback(24)
    models = ModelsRef.of(tiny_model_dir, tiny_model_dir)
    settings = _settings(prompts=100, per_prompt=2, sampling={"temperature": 0.8, "top_k": 20})
    ctx = stage_ctx("policy_samples", feedback=fb, models=models, settings=settings)
    return fb, models, settings, policy_samples.sample(fb, models, settings, ctx), ctx


def test_samples_come_from_training_prompts_only_each_labelled(sampled, tmp_path):
    from t2g_core.config.stages import PPOSettings
    from t2g_core.ppo.run import prepare_run

    fb, models, settings, ref, ctx = sampled
    items, labels = read(ref.feedback, "feedback"), read(ref.annotations, "annotations")
    run = prepare_run(PPOSettings(holdout=HOLDOUT), tmp_path / "ppo", read(fb, "feedback"), models.policy)
    ppo_train = set(pd.read_parquet(run / "prompts.parquet")["id"])
    held_out = set(pd.read_parquet(run / "eval.parquet")["id"])
    source = sampled_from(items)
    assert set(source) == ppo_train and not set(source) & held_out  # all 18 training prompts (prompts=100), no other
    assert len(items) == 2 * len(ppo_train) and items["id"].is_unique  # per_prompt=2
    assert set(items["id"]) == {f"{i}@policy.{k}" for i in ppo_train for k in (0, 1)}
    original = read(fb, "feedback").set_index("id")
    for row, item_id in zip(items.itertuples(index=False), source, strict=True):
        assert row.prompt == original.loc[item_id, "prompt"] and row.reference == original.loc[item_id, "reference"]
        assert pd.isna(row.critique) and json.loads(row.meta)["sampled_from"] == item_id  # not the item's own meta
    assert (items["response"] != original.loc[list(source), "response"].to_numpy()).all()  # the policy's text
    assert list(labels["id"]) == list(items["id"]) and (labels["status"] == "ok").mean() > 0.5
    assert {"policy_samples", "policy_sample_annotations"} <= set(ctx.tracker.outputs)


def test_the_same_settings_draw_the_same_samples_and_fewer_prompts_a_subset(sampled, stage_ctx):
    fb, models, settings, ref, _ = sampled
    again = policy_samples.sample(fb, models, settings, stage_ctx("policy_samples", x=1, settings=settings))
    assert read(again.feedback, "feedback").equals(read(ref.feedback, "feedback"))
    few = _settings(prompts=5, per_prompt=1)
    fewer = policy_samples.draw_prompts(fb, few)
    assert len(fewer) == 5 and set(fewer["id"]) <= set(sampled_from(read(ref.feedback, "feedback")))
    other = policy_samples.draw_prompts(fb, _settings(prompts=5, per_prompt=1, seed=1))
    assert set(other["id"]) != set(fewer["id"])  # the seed draws the prompts


def test_a_finished_run_with_the_same_key_is_reused_unless_forced(sampled, monkeypatch):
    from dataclasses import replace

    fb, models, settings, ref, ctx = sampled

    def no_sampling(*args, **kwargs):
        raise AssertionError("sampled again")

    monkeypatch.setattr(policy_samples, "sample_responses", no_sampling)
    assert policy_samples.sample(fb, models, settings, ctx) == ref  # outside the flow's task cache too
    with pytest.raises(AssertionError, match="sampled again"):
        policy_samples.sample(fb, models, settings, replace(ctx, force=True))


def test_a_prompt_the_annotator_cannot_label_fails_before_any_sampling(
    demo_feedback, tiny_model_dir, stage_ctx, tmp_path
):
    from t2g_core.workspace import Workspace

    df = read(demo_feedback(12), "feedback")
    df["reference"] = None  # the reference critic needs one
    fb = Workspace.at(tmp_path / "ws").store.write("feedback", "noref", df, "feedback")
    settings = _settings(prompts=4)
    ctx = stage_ctx("policy_samples", feedback=fb, settings=settings)
    with pytest.raises(ValueError, match="reference"):
        policy_samples.sample(fb, ModelsRef.of(tiny_model_dir, tiny_model_dir), settings, ctx)
    assert not (ctx.workspace.artifacts / "policy_samples").exists()


@pytest.mark.slow
def test_the_reward_model_trains_on_the_samples_of_its_training_prompts(sampled, stage_ctx):
    from t2g_core.annotators import annotate

    fb, models, _, ref, _ = sampled
    ann_df = annotate(read(fb, "feedback"), AnnotateConfig(annotator="reference"), progress=False).frame
    ann = stage_ctx("annotate").out.artifact("annotations", ann_df, "annotations")
    cfg = RewardModelConfig(kind="tagger", max_steps=1, batch_size=4, val_fraction=0.3, eval_max_items=2)
    settings = RewardModelSettings(reward_model=cfg)
    ctx = stage_ctx("reward_model", feedback=fb, annotations=ann, models=models, settings=settings, samples=ref)
    rm = reward_model.train(fb, ann, None, None, models, settings, ctx, ref)

    rows = read(rm.rm_data, "rm_data").set_index("id")
    items = read(ref.feedback, "feedback")
    source = dict(zip(items["id"], sampled_from(items), strict=True))
    ok = set(read(ref.annotations, "annotations").query("status == 'ok'")["id"])
    used = {i for i in rows.index if i in source}
    expected = {i for i, s in source.items() if split_for_id(s, 0.3) == "train" and i in ok}
    held = {i for i, s in source.items() if split_for_id(s, 0.3) != "train" and i in ok}
    assert used == expected | held and expected and held
    assert set(rows.loc[list(expected), "split"]) == {"train"}
    assert set(rows.loc[list(held), "split"]) == {"test"}  # validation prompts' samples: the policy-text test
    dataset = rows[~rows.index.isin(list(source))]
    assert set(dataset["split"]) == {"train", "validation"}  # the dataset's items keep their split
    trained_on = read(rm.feedback, "feedback")
    assert set(rows.index) <= set(trained_on["id"]) and len(trained_on) == 24 + len(source)
    # measured on the policy's held-out text beside the dataset's items (before: the samples only trained it)
    for name in ("span_f1", "truth_poor_char_f1", "omission_recall", "rm_reward", "annotator_reward", "reward_gap"):
        assert f"policy_{name}" in rm.metrics, name
    assert rm.metrics["policy_reward_gap"] == pytest.approx(
        rm.metrics["policy_rm_reward"] - rm.metrics["policy_annotator_reward"]
    )
