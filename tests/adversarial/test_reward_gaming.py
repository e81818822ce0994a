"""Responses that try to game the rewards: empty, truncated, everything omitted, correct facts repeated, wrong facts
dropped instead of fixed. Scored by the real reference critic, placed on a real tokenizer's sampled ids, then turned
into advantages by every estimator. Before omission-aware rewards a wrong fact cost -1 and a missing one 0, so from a
weak warm start PPO learnt to stop after one clause ("A person named noodles.")."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from t2g_core.config.align import AlignConfig
from t2g_core.config.ppo import PPOConfig
from t2g_core.critics.reference import ReferenceCritic
from t2g_core.demo.summarization import reference_summary
from t2g_core.ppo.rewards import place_task_rewards, score
from t2g_core.ppo.scoring import CriticSource
from t2g_core.rl import assemble_rewards, estimate_advantages, per_token_kl
from tests.core._rollouts import text_rollout

FACTS = {
    "name": "Gus",
    "city": "Dakar",
    "count": "2",
    "pet": "ducks",
    "color": "yellow",
    "job": "tailor",
    "day": "Sunday",
    "food": "bread",
}
ROW = {
    "task": "summarization",
    "prompt": "I am named Gus.",
    "reference": reference_summary(FACTS),
    "meta": {"facts": FACTS},
}
CORRECT = reference_summary(FACTS)
GAMES = {
    "empty": "",
    "one clause": "A person named Gus.",
    "a wrong clause and stop": "A person named noodles.",
    "template only": "A person.",
    "correct facts repeated": CORRECT + " Also, rests on Sunday. Also, rests on Sunday.",
    "a correct fact said twice in place": CORRECT.replace("named Gus", "named Gus Gus"),
    "truncated mid-way": CORRECT[: CORRECT.index(", works")],
}
MODES = ("span", "scalar", "uniform", "dense")


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def scored(tok, responses, words=False, align=None):
    ro = text_rollout(tok, responses, [dict(ROW, id=f"r{i}") for i in range(len(responses))])
    return ro, score(ro, CriticSource(ReferenceCritic()), tok, align, words=words)


def totals(tok, responses, mode, penalty, align=None):
    ro, sc = scored(tok, responses, words=mode == "dense", align=align)
    task, terminal, _ = place_task_rewards(sc, ro, PPOConfig(reward_mode=mode, omission_penalty=penalty))
    return (task.sum(dim=1) + terminal).tolist()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("game", list(GAMES))
def test_no_game_earns_what_the_correct_summary_earns(tok, mode, game):
    correct, gamed = totals(tok, [CORRECT, GAMES[game]], mode, penalty=1.0)
    assert gamed < correct, (game, gamed, correct)


def test_without_the_penalty_stopping_early_beats_trying(tok):
    """The trap, measured: a summary with five wrong facts of eight scores below stopping after the first clause,
    unless the left-out facts cost what wrong ones do."""
    attempt = CORRECT
    for right, wrong in (("Dakar", "Lima"), ("2", "5"), ("ducks", "cats"), ("yellow", "black"), ("tailor", "judge")):
        attempt = attempt.replace(right, wrong)
    stop = "A person named Gus."
    for mode in ("span", "scalar", "uniform"):
        tried, stopped = totals(tok, [attempt, stop], mode, penalty=0.0)
        assert stopped > tried  # omission pays
        tried, stopped = totals(tok, [attempt, stop], mode, penalty=1.0)
        assert stopped < tried  # it no longer does


@pytest.mark.parametrize("mode", MODES)
def test_dropping_a_wrong_fact_never_beats_stating_it(tok, mode):
    wrong = CORRECT.replace("Dakar", "Lima")
    dropped = CORRECT.replace(" lives in Dakar", "")
    stated, omitted = totals(tok, [wrong, dropped], mode, penalty=1.0)
    assert omitted <= stated + 1e-5  # the same total (a good span's shared label sums to 1 within float rounding)


def test_per_span_poor_labels_make_stating_a_fact_break_even_at_half_certainty(tok):
    """Without omission reports a right value earns +1 (its tokens share it) and a wrong one costs -1 per token: a
    wrong "judge" (several tokens here) costs more than a right "tailor" earns, so stating the job pays only above
    n / (n + 1) certainty. ``span_reward: per_span`` makes a wrong value cost -1 whatever its length."""
    right, wrong = CORRECT, CORRECT.replace("tailor", "judge")
    omitted = CORRECT.replace(", works as a tailor", "")
    per_token = totals(tok, [right, wrong, omitted], "span", 0.0)
    assert per_token[2] - per_token[1] > 1.5  # the wrong multi-token value costs more than the right one earns
    shared = totals(tok, [right, wrong, omitted], "span", 0.0, AlignConfig(span_reward="per_span"))
    assert shared[0] - shared[2] == pytest.approx(1.0) and shared[2] - shared[1] == pytest.approx(1.0)


ESTIMATORS = ("gae", "span_local", "span_bootstrap", "rloo", "grpo")


@pytest.mark.parametrize("placement", ["anchor", "end"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_every_estimator_charges_the_token_that_stopped_early(tok, estimator, placement):
    """Samples of one prompt: the full correct summary and the same summary cut after two clauses. The token where
    the truncated one ended its sentence (instead of going on) gets negative credit from every estimator."""
    cut = CORRECT[: CORRECT.index(" with")] + "."
    ro, sc = scored(tok, [CORRECT, cut, CORRECT, cut])
    cfg = PPOConfig(
        omission_placement=placement,
        advantage_estimator=estimator,
        group_size=4 if estimator in ("rloo", "grpo") else 1,
    )
    task, terminal, _ = place_task_rewards(sc, ro, cfg)
    kl = per_token_kl(torch.zeros(task.shape), torch.zeros(task.shape), ro.response_mask)
    rewards = assemble_rewards(task, kl, ro.response_mask, 0.05, terminal)
    values = torch.zeros_like(rewards)  # an uninformed critic: what the estimator itself does with the signal
    adv, _ = estimate_advantages(
        estimator, rewards, values, ro.response_mask, task=task, terminal=terminal, group=ro.group, gamma=1.0, lam=0.95
    )
    stop = next(k for k, (a, b) in enumerate(sc[1].offsets) if sc[1].text[a:b] == ".")
    assert float(adv[1, stop]) < 0, (estimator, placement, adv[1].tolist())
    m = ro.response_mask.float()
    assert float((adv[1] * m[1]).sum()) < float((adv[0] * m[0]).sum())


def test_span_local_without_the_penalty_is_blind_to_stopping_early(tok):
    """Why span-local credit collapsed one seed in five: with nothing charged for the omission, the stopping token's
    local return is 0 (no later span reaches it)."""
    cut = CORRECT[: CORRECT.index(" with")] + "."
    ro, sc = scored(tok, [cut])
    cfg = PPOConfig(advantage_estimator="span_local", omission_penalty=0.0)
    task, terminal, _ = place_task_rewards(sc, ro, cfg)
    rewards = assemble_rewards(task, torch.zeros(task.shape), ro.response_mask, 0.0, terminal)
    adv, _ = estimate_advantages(
        "span_local",
        rewards,
        torch.zeros_like(rewards),
        ro.response_mask,
        task=task,
        terminal=terminal,
        group=None,
        gamma=1.0,
        lam=1.0,
    )
    stop = next(k for k, (a, b) in enumerate(sc[0].offsets) if sc[0].text[a:b] == ".")
    assert float(adv[0, stop]) == 0.0
