"""Against a real OpenAI-compatible server: ``transformers serve`` on 127.0.0.1, serving the tiny test model.

The fake server (``t2g_core.testing``) injects faults; this checks the protocol against a server the project does
not write. ``transformers serve`` accepts ``response_format`` and ignores it (HTTP 200, prose), runs one request at
a time, pins the model it was started with (another ``model`` gets HTTP 400 with a FastAPI ``detail``), and the tiny
random model answers garbage (newlines until ``max_tokens``). So every path ends in a status, never a crash: the LLM
annotator says in one line that the schema was ignored and asks again in the prompt, then records parse_errors; PPO
with ``reward_source=endpoint`` gives every rollout ``parse_failure_reward``; the judge reports its items failed and
no rate; a wrong model name gets the server's own words.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pandas as pd
import pytest

from t2g_core.annotators import annotate
from t2g_core.config import PPOConfig, RewardModelConfig
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.config.reward_model import EndpointConfig
from t2g_core.evaluation.judge import PairwiseJudge, first_error, win_rate
from t2g_core.ppo import train
from t2g_core.ppo.sources import make_reward_source
from t2g_core.reward_model.endpoint import EndpointScorer
from tests.core.test_annotate_llm import feedback

# one server for the module: its tests share a worker (each start-up loads the model server, about 10 s)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.xdist_group("transformers-serve")]

IGNORED = re.compile(
    r"^the endpoint ignored response_format: (\d+) of \1 answers were not JSON; asking for JSON in the prompt instead$"
)

ROLLOUTS = [
    {"task": "summarization", "prompt": f"I live in City{i}. I am named N{i}.", "response": f"N{i} lives in City{i}"}
    for i in range(3)
]


@dataclass(frozen=True)
class Served:
    base_url: str
    model: str  # the folder it was started with: the only model name it answers to
    log: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen, url: str, log: Path, limit_s: float = 180.0) -> None:
    """Until ``GET /health`` answers 200 (15-36 s for SmolLM2 on 2 busy cores); the server's log if it exits."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"transformers serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"transformers serve not healthy after {limit_s:g} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def served(tiny_model_dir, tmp_path_factory):
    """``transformers serve <tiny model folder>`` on a free port, stopped by its process id whatever the tests do."""
    root = tmp_path_factory.mktemp("serve")
    port, log = _free_port(), root / "serve.log"
    exe = Path(sys.executable).parent / "transformers"  # the script of the environment running the tests
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(root / "hf")}
    cmd = [str(exe), "serve", str(tiny_model_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_healthy(proc, f"http://127.0.0.1:{port}/health", log)
        yield Served(f"http://127.0.0.1:{port}/v1", str(tiny_model_dir), log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the server and anything it started
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


def _cfg(served: Served, **kw) -> AnnotateConfig:
    base = dict(annotator="llm", base_url=served.base_url, model=served.model, max_tokens=24, max_retries=1)
    return AnnotateConfig(**{**base, **kw})


def test_the_annotator_finds_the_schema_ignored_says_so_and_asks_in_the_prompt(served, tmp_path):
    lines: list[str] = []
    run = annotate(feedback(4), _cfg(served), cache_dir=tmp_path, progress=False, log=lines.append)
    assert "Ignoring unsupported fields in the request: {'response_format'}" in served.log.read_text()
    assert len(lines) == 1 and IGNORED.match(lines[0]), lines
    assert run.stats["structured_output"] == "ignored" and run.stats["answer_formats"] == {"prompted_json": 4}
    assert run.stats["requests"] == 8  # each item asked with the schema, then again with JSON in the prompt
    assert set(run.frame["status"]) == {"parse_error"}, run.frame[["status", "error"]].to_dict("records")
    assert run.frame["error"].str.contains("truncated at max_tokens=24|no JSON object").all()


def test_a_model_name_the_server_is_not_pinned_to_gets_its_own_400_text(served):
    expected = f"HTTP 400: Server is pinned to '{served.model}'; requested 'other-model'."
    run = annotate(feedback(2), _cfg(served, model="other-model"), progress=False)
    assert run.frame["status"].tolist() == ["api_error"] * 2 and run.frame["error"].tolist() == [expected] * 2
    judge = PairwiseJudge.from_endpoint(served.base_url, "other-model", timeout_s=60.0, max_tokens=16)
    judged = judge.judge(["Summarise: Ana moved."], ["Ana moved."], ["Ana left."])
    assert [j.status for j in judged] == ["api_error"] and first_error(judged) == expected
    assert win_rate(judged)["win_rate"] is None  # nothing judged: no rate


def test_the_judge_keeps_every_reply_and_reports_no_rate_when_nothing_was_judged(served):
    judge = PairwiseJudge.from_endpoint(served.base_url, served.model, timeout_s=60.0, max_tokens=16)
    judged = judge.judge(["Summarise: Ana moved to Lisbon."] * 2, ["Ana moved."] * 2, ["Ana moved to Lisbon."] * 2)
    assert {j.status for j in judged} <= {"ok", "parse_error"} and all(j.reply_ab is not None for j in judged)
    rate = win_rate(judged)
    assert rate["judged"] + rate["failed"] == 2
    if not rate["judged"]:  # the usual outcome with a random model: replies that name no winner
        assert rate["win_rate"] is None and "no winner" in first_error(judged)


def test_the_reward_models_own_prompt_goes_without_a_schema_and_garbage_is_a_parse_error(served):
    endpoint = EndpointConfig(base_url=served.base_url, model=served.model, max_tokens=24)  # prompt=reward_model
    before = len(served.log.read_text())
    out = EndpointScorer(RewardModelConfig(endpoint=endpoint)).critique_batch(ROLLOUTS)
    assert [f.status for f in out] == ["parse_error"] * 3 and all(f.raw is not None for f in out)
    assert "Ignoring unsupported fields" not in served.log.read_text()[before:]  # no response_format was sent


def test_ppo_on_the_served_model_rewards_every_rollout(served, tiny_model_dir, tmp_path, caplog):
    """Every rollout's answer is garbage: each gets ``parse_failure_reward`` on its last token and the step's
    failure rate says so; with the annotator's prompt the schema check speaks once, through the log."""
    prompts = pd.DataFrame(
        [{"id": f"p{i}", "task": "summarization", "prompt": f"I live in City{i}.", "meta": None} for i in range(4)]
    )
    cfg = PPOConfig(
        reward_source="endpoint",
        steps=1,
        batch_size=4,
        minibatches=1,
        ppo_epochs=1,
        sampling={"max_new_tokens": 8},
        parse_failure_reward=-7.0,
        value_model="head",
        log_every=1,
    )
    endpoint = EndpointConfig(base_url=served.base_url, model=served.model, prompt="annotator", max_tokens=24)
    source = make_reward_source("endpoint", "summarization", rm_cfg=RewardModelConfig(endpoint=endpoint))
    with caplog.at_level(logging.WARNING, logger="t2g_core.annotators.llm"):
        res = train(cfg, tiny_model_dir, prompts, tmp_path / "run", reward_source=source)
    roll = pd.read_parquet(res.rollouts_path)
    assert len(roll) == 4 and roll["critique"].isna().all()
    assert all(r[-1] == pytest.approx(-7.0) and not any(r[:-1]) for r in roll["token_rewards"])
    assert res.history[0]["parse/failure_rate"] == 1.0
    said = [r.getMessage() for r in caplog.records if "response_format" in r.getMessage()]
    assert len(said) == 1 and IGNORED.match(said[0]), said
