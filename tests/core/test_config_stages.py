"""What the adapters ask the stage settings instead of deciding it themselves: does PPO score with the reward model,
which environment variable holds a stage's API key; and the one reader of that key (``t2g_env.api_key``)."""

from __future__ import annotations

import pytest

from t2g_core.config import PipelineConfig, load_config
from t2g_core.evaluation.judge import PairwiseJudge, judge_for
from t2g_core.stages.registry import ORDER, settings_for
from t2g_env import api_key


def _settings(stage: str, *overrides: str):
    return settings_for(stage, load_config(None, list(overrides)))


@pytest.mark.parametrize(
    ("source", "path", "uses", "trained"),
    [
        ("reward_model", None, True, True),
        ("reward_model", "/some/rm", True, False),
        ("oracle", None, False, False),
        ("endpoint", None, False, False),
    ],
)
def test_ppo_says_whether_it_scores_with_the_reward_model(source, path, uses, trained):
    overrides = [f"ppo.reward_source={source}", *([f"ppo.reward_model_path={path}"] if path else [])]
    settings = _settings("ppo", *overrides)
    assert (settings.uses_reward_model, settings.uses_trained_reward_model) == (uses, trained)


def test_each_stage_names_the_variable_of_the_key_it_sends():
    defaults = {stage: settings_for(stage, PipelineConfig()).api_key_env for stage in ORDER}
    assert defaults == dict.fromkeys(ORDER)  # the defaults call no outside service
    llm = _settings("annotate", "annotate.annotator=llm", "annotate.api_key_env=ANNOTATOR_KEY")
    assert llm.api_key_env == "ANNOTATOR_KEY"
    endpoint = _settings("ppo", "ppo.reward_source=endpoint", "reward_model.endpoint.api_key_env=RM_KEY")
    assert endpoint.api_key_env == "RM_KEY"
    judged = _settings("evaluate", "evaluate.judge_base_url=http://judge/v1")
    assert judged.api_key_env == "OPENAI_API_KEY"
    own = _settings("evaluate", "evaluate.judge_base_url=http://j/v1", "evaluate.judge_api_key_env=J")
    assert own.api_key_env == "J"


def test_the_key_is_read_from_the_named_variable_only(monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-judge")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    judged = _settings("evaluate", "evaluate.judge_base_url=http://judge/v1", "evaluate.judge_api_key_env=JUDGE_KEY")
    assert api_key(judged) == "sk-judge"
    assert api_key(_settings("evaluate")) is None  # no judge: no key, even though OPENAI_API_KEY is set
    monkeypatch.delenv("JUDGE_KEY")
    assert api_key(judged) is None


def test_the_judge_is_built_from_its_settings_and_the_key_handed_in():
    assert judge_for(_settings("evaluate").evaluate, "sk") is None
    cfg = _settings("evaluate", "evaluate.judge_base_url=http://judge/v1", "evaluate.judge_model=m").evaluate
    judge = judge_for(cfg, "sk-judge")
    assert isinstance(judge, PairwiseJudge) and judge.model == "m"
    assert judge.client.api_key == "sk-judge" and str(judge.client.base_url).startswith("http://judge/v1")
