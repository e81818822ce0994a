"""The PPO stage: which reward model it scores with and what it reports the reward came from; a run that needs a
reward model refuses to start without one; a run that finds its checkpoint resumes from it and says so, a forced one
trains afresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t2g_core.config import PPOConfig
from t2g_core.config.stages import PPOSettings
from t2g_core.stages import ppo
from t2g_core.stages.refs import ArtifactRef, ModelsRef, RewardModelRef
from tests.core._ppo_small import SMALL

MODELS = ModelsRef(base="base", policy="policy", base_digest="b", policy_digest="p")
RM_DATA = ArtifactRef(path="/rm_data", sha256="0" * 64, n_rows=1, schema="rm_data", key="k")


def _rm(**metrics) -> RewardModelRef:
    return RewardModelRef(model_dir="/trained", kind="tagger", base="b", rm_data=RM_DATA, digest="d", metrics=metrics)


def _settings(**ppo_fields) -> PPOSettings:
    return PPOSettings(ppo=PPOConfig(**ppo_fields))


def test_the_reward_model_path_prefers_the_setting_over_the_trained_one():
    assert ppo.reward_model_path(_settings(reward_model_path="/named"), _rm()) == "/named"
    assert ppo.reward_model_path(_settings(), _rm()) == "/trained"
    assert ppo.reward_model_path(_settings(), None) is None


def test_the_reward_facts_name_the_source_and_the_trained_reward_models_quality():
    rm = _rm(span_f1=0.5, truth_span_f1=0.25, loss=3.0)
    assert ppo.reward_facts(_settings(reward_source="reward_model"), rm) == {
        "source": "reward_model",
        "kind": "tagger",
        "rm_truth_span_f1": 0.25,
        "rm_span_f1": 0.5,
    }
    named = _settings(reward_source="reward_model", reward_model_path="/named")
    assert ppo.reward_facts(named, rm) == {"source": "reward_model"}  # not the model the pipeline trained
    assert ppo.reward_facts(_settings(reward_source="oracle"), rm) == {"source": "oracle"}


def test_run_reward_stats_average_over_the_run():
    history = [
        {"time/step": 2.0, "time/score": 1.0, "spans/unmatched_rate": 0.5},
        {"time/step": 2.0, "time/score": 0.0, "spans/unmatched_rate": 0.0},
    ]
    assert ppo.run_reward_stats(history) == {"score_share": 0.25, "rollout_unmatched_rate": 0.25}
    assert ppo.run_reward_stats([{"step": 0}]) == {}


def test_a_reward_model_run_without_a_reward_model_refuses_to_start(demo_feedback, stage_ctx, tmp_path):
    ctx = stage_ctx("ppo")
    with pytest.raises(ValueError, match="needs a trained reward model"):
        ppo.train(demo_feedback(4), MODELS, None, _settings(reward_source="reward_model"), ctx)
    assert not (tmp_path / "ws" / "checkpoints" / "ppo").exists()


def test_the_key_follows_the_settings_the_stage_reads(demo_feedback, key_of):
    fb = demo_feedback(4)

    def key(settings, reward_model=None):
        return key_of("ppo", feedback=fb, models=MODELS, reward_model=reward_model, settings=settings)

    assert key(PPOSettings(ppo=SMALL)) == key(PPOSettings(ppo=SMALL.model_copy()))
    assert key(PPOSettings(ppo=SMALL)) != key(PPOSettings(ppo=SMALL.model_copy(update={"steps": 3})))
    assert key(PPOSettings(ppo=SMALL)) != key(PPOSettings(ppo=SMALL), _rm())


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
