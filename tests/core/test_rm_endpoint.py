"""``reward_source=endpoint``: rollouts scored by an OpenAI-compatible server (the project's local test server),
with the reward model's own prompt or the annotator's, through the annotator's statuses, cache and retries."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from t2g_core.config import PPOConfig, RewardModelConfig
from t2g_core.config.reward_model import EndpointConfig
from t2g_core.ppo import train
from t2g_core.ppo.sources import make_reward_source
from t2g_core.reward_model.endpoint import EndpointScorer
from t2g_core.reward_model.prompts import rm_messages
from t2g_core.testing.openai_server import FakeOpenAIServer

ROWS = [
    {
        "task": "summarization",
        "prompt": f"I live in City{i}. I am named N{i}.",
        "response": f"N{i} lives in City{i} now",
    }
    for i in range(12)
]


def rm_answer(request: dict) -> str:
    """A served reward model's answer: it quotes the first and last word of the summary after its header."""
    user = request["messages"][-1]["content"]
    words = re.split(r"### Summary\n", user)[-1].split()
    return json.dumps({"critique": "The last word is vague.", "good_spans": words[:1], "poor_spans": words[-1:]})


def _cfg(server: FakeOpenAIServer, **kw) -> RewardModelConfig:
    endpoint = EndpointConfig(
        **{"base_url": server.base_url, "timeout_s": 5.0, "max_retries": 1, "concurrency": 4, **kw}
    )
    return RewardModelConfig(endpoint=endpoint)


def test_the_reward_models_own_prompt_is_sent_and_answers_become_feedback(tmp_path):
    with FakeOpenAIServer(answer=rm_answer) as server:
        scorer = EndpointScorer(_cfg(server), cache_dir=tmp_path / "answers")
        out = scorer.critique_batch(ROWS[:3])
        sent = sorted(json.dumps(m["messages"]) for m in server.requests)  # concurrent: any arrival order
        assert sent == sorted(json.dumps(rm_messages(r["task"], r["prompt"], r["response"])) for r in ROWS[:3])
        assert all("response_format" not in m for m in server.requests)  # a served RM answers in its own format
        # the same rollout again is answered from the cache: no request
        again = scorer.critique_batch(ROWS[:3])
        assert server.n_requests == 3
    assert [(f.status, f.good_spans, f.poor_spans) for f in out] == [
        ("ok", [r["response"].split()[0]], [r["response"].split()[-1]]) for r in ROWS[:3]
    ]
    assert [f.poor_spans for f in again] == [f.poor_spans for f in out]


def test_the_annotator_prompt_asks_an_llm_for_the_schema(tmp_path):
    with FakeOpenAIServer() as server:
        scorer = EndpointScorer(_cfg(server, prompt="annotator"), cache_dir=None)
        out = scorer.critique_batch(ROWS[:2])
        body = server.requests[0]
    assert "<response>" in body["messages"][-1]["content"] and body["response_format"]["type"] == "json_schema"
    assert all(f.ok and f.good_spans for f in out)


def test_faults_become_statuses_and_every_row_is_answered(tmp_path):
    with FakeOpenAIServer(answer=rm_answer, fault_rate=0.5, seed=4, slow_s=1.0) as server:
        out = EndpointScorer(_cfg(server, timeout_s=0.5), cache_dir=tmp_path).critique_batch(ROWS)
    statuses = [f.status for f in out]
    assert len(out) == len(ROWS) and "ok" in statuses and set(statuses) - {"ok"}, statuses
    for f in out:
        assert f.ok == (f.error is None)


def test_a_remote_endpoint_without_a_key_fails_at_once():
    cfg = RewardModelConfig(endpoint=EndpointConfig(base_url="https://api.example.com/v1"))
    with pytest.raises(ValueError, match="no API key"):
        EndpointScorer(cfg)
    with pytest.raises(ValueError, match="endpoint.base_url"):
        EndpointScorer(RewardModelConfig())


def test_ppo_on_an_endpoint_with_faults_rewards_every_rollout(tiny_model_dir, tmp_path):
    """Every rollout gets a reward: answered ones their spans, failed ones ``parse_failure_reward``."""
    prompts = pd.DataFrame(
        [{"id": f"p{i}", "task": r["task"], "prompt": r["prompt"], "meta": None} for i, r in enumerate(ROWS[:8])]
    )
    cfg = PPOConfig(
        reward_source="endpoint",
        steps=2,
        batch_size=8,
        minibatches=2,
        ppo_epochs=1,
        sampling={"max_new_tokens": 8},
        parse_failure_reward=-7.0,
        kl_coef=0.0,
        value_model="head",
        log_every=1,
    )
    with FakeOpenAIServer(answer=rm_answer, fault_rate=0.4, faults=("server_error", "malformed"), seed=2) as server:
        source = make_reward_source(
            "endpoint", "summarization", rm_cfg=_cfg(server, max_retries=0), cache_dir=tmp_path / "answers"
        )
        res = train(cfg, tiny_model_dir, prompts, tmp_path / "run", reward_source=source)
    roll = pd.read_parquet(res.rollouts_path)
    assert len(roll) == 16 and all(len(r) > 0 for r in roll["token_rewards"])
    failed = roll[roll["critique"].isna()]
    assert 0 < len(failed) < len(roll)
    assert all(r[-1] == pytest.approx(-7.0) and not any(r[:-1]) for r in failed["token_rewards"])
    assert sum(h["parse/failure_rate"] for h in res.history) == pytest.approx(len(failed) / 8)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nobody listens once it is closed


@pytest.mark.parametrize("server_kind", ["answers garbage", "closed port"])
def test_ppo_stops_when_the_reward_source_keeps_failing(tiny_model_dir, tmp_path, server_kind):
    """Every answer unparseable, or no server at all: PPO stops after ``reward_failure_patience`` steps over
    ``max_reward_failure_rate`` instead of training on the failure reward and saving an adapter; the rollouts table
    says what failed (before: exit 0, an adapter, reward 0 everywhere, no status column)."""
    import contextlib

    from t2g_core.ppo.failures import RewardSourceFailed

    prompts = pd.DataFrame(
        [{"id": f"p{i}", "task": r["task"], "prompt": r["prompt"], "meta": None} for i, r in enumerate(ROWS[:4])]
    )
    cfg = PPOConfig(
        reward_source="endpoint",
        steps=6,
        batch_size=4,
        minibatches=1,
        ppo_epochs=1,
        sampling={"max_new_tokens": 6},
        value_model="head",
        log_every=1,
        reward_failure_patience=2,
    )
    garbage = server_kind == "answers garbage"
    with (
        FakeOpenAIServer(answer=lambda request: "no JSON here, sorry")
        if garbage
        else contextlib.nullcontext() as server
    ):
        url = server.base_url if garbage else f"http://127.0.0.1:{_closed_port()}/v1"
        rm_cfg = RewardModelConfig(endpoint=EndpointConfig(base_url=url, timeout_s=2.0, max_retries=0))
        source = make_reward_source("endpoint", "summarization", rm_cfg=rm_cfg, cache_dir=tmp_path / "answers")
        with pytest.raises(RewardSourceFailed, match=r"PPO stopped at step 1: .* failed on 100%, 100% of the rollouts"):
            train(cfg, tiny_model_dir, prompts, tmp_path / "run", reward_source=source)
    assert not (tmp_path / "run" / "adapter").exists()  # no trained policy is published
    roll = pd.read_parquet(tmp_path / "run" / "rollouts.parquet")
    assert sorted(set(roll["step"])) == [0, 1]
    assert set(roll["status"]) == ({"parse_error"} if garbage else {"api_error"}) and roll["error"].notna().all()


def test_a_failure_streak_counts_consecutive_steps_only():
    from t2g_core.ppo.failures import failure_streak

    rates = [0.9, 0.1, 0.8, 0.6, 0.7]
    assert failure_streak([{"parse/failure_rate": r} for r in rates], 0.5) == 3
    assert failure_streak([{"parse/failure_rate": r} for r in rates], 0.75) == 0
