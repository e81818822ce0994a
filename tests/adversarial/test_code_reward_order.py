"""The reward order for code, with the default PPO settings, in every reward mode: passes all > passes some > fails >
no real attempt (a stub, empty, a crash at import, killing its harness, swallowing its timeout). Scored by the real
code critic in its sandbox and placed on a real tokenizer's ids. Before: correct code, an empty response,
``os._exit(0)`` at import and a loop that swallows the timeout all summed to 0 while wrong code got -12, so RL
learnt that answering nothing beats trying."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from t2g_core.config.ppo import PPOConfig
from t2g_core.critics.code import CodeCritic
from t2g_core.critics.sandbox import SandboxLimits
from t2g_core.ppo.rewards import critique, decode, place_task_rewards, score
from t2g_core.ppo.scoring import CriticSource, label_responses
from tests.core._rollouts import text_rollout

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
TESTS = (
    "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n"
    "    assert candidate(-1, 1) == 0\n"
)
PASSES_ALL = "def add(a, b):\n    return a + b\n"
PASSES_SOME = "def add(a, b):\n    return abs(a) + b\n"  # 2 of 3
FAILS = "def add(a, b):\n    return a - b\n"
NO_ATTEMPT = {
    "a stub": "def add(a, b):\n    pass\n",
    "empty": "",
    "raises at import": "raise RuntimeError('no')\n",
    "exits the interpreter at import": "import os\nos._exit(0)\n",
    "swallows its timeout": "import time\ndef add(a, b):\n    while True:\n        try:\n            time.sleep(5)\n"
    "        except BaseException:\n            pass\n",
    "kills its parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef add(a, b):\n    return a + b\n",
}
MODES = ("span", "scalar", "uniform", "dense")
# with the sandbox tests (see tests/core/test_sandbox_bounds.py), on one worker: `scored` runs the sandboxes once
pytestmark = pytest.mark.xdist_group("sandbox")


def _row(i: int) -> dict:
    return {"id": f"r{i}", "task": "code", "prompt": PROMPT, "tests": TESTS, "entry_point": "add"}


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def scored(tok):
    """Every case critiqued once (the sandbox is the slow part); the labels are placed per mode below."""
    responses = [PASSES_ALL, PASSES_SOME, FAILS, *NO_ATTEMPT.values()]
    ro = text_rollout(tok, responses, [_row(i) for i in range(len(responses))])
    decoded = decode(ro, tok)
    feedback = critique(
        ro, decoded, CriticSource(CodeCritic(SandboxLimits(timeout_s=1.0), mutation_localisation=False))
    )
    spans = label_responses(decoded, feedback, None)
    return ro, spans, label_responses(decoded, feedback, None, words=True)  # dense mode: the critic's word labels


def test_the_critic_judges_every_case_as_the_candidates_doing(scored):
    _, spans, _ = scored
    assert all(s.feedback.ok for s in spans), [(s.feedback.status, s.feedback.error) for s in spans]
    verdicts = [s.feedback.outcome for s in spans]
    assert verdicts[:3] == [1.0, pytest.approx(1 / 3), -1.0]
    assert all(v == -1.0 for v in verdicts[3:]), dict(zip(NO_ATTEMPT, verdicts[3:], strict=True))


@pytest.mark.parametrize("settings", [{}, {"span_coef": 3.0, "outcome_coef": 0.25, "omission_penalty": 2.0}])
@pytest.mark.parametrize("mode", MODES)
def test_summed_rewards_follow_the_order(scored, mode, settings):
    ro, spans, words = scored
    cfg = PPOConfig(reward_mode=mode, **settings)
    task, terminal, _ = place_task_rewards(words if mode == "dense" else spans, ro, cfg)
    total = (task.sum(dim=1) + terminal).tolist()
    passes_all, passes_some, fails, *no_attempt = total
    assert passes_all > passes_some > fails, total
    for name, value in zip(NO_ATTEMPT, no_attempt, strict=True):
        assert value < fails, (name, value, fails)


def test_blaming_a_long_line_costs_what_blaming_a_short_one_does(tok):
    """The verdict, not the number of tokens blamed, orders failing code: a wrong answer on a long line is not
    worse than the same wrong answer on a short one."""
    short = "def add(a, b):\n    return a - b\n"
    long = "def add(a, b):\n    return (a - b) + 0 * (a + b + a + b + a + b + a + b + a + b + a + b)\n"
    ro = text_rollout(tok, [short, long], [_row(0), _row(1)])
    sc = score(ro, CriticSource(CodeCritic(SandboxLimits(timeout_s=2.0), mutation_localisation=False)), tok, None)
    task, terminal, _ = place_task_rewards(sc, ro, PPOConfig())
    a, b = (task.sum(dim=1) + terminal).tolist()
    assert a == pytest.approx(b, abs=1e-5)
