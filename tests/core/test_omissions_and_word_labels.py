"""Omission-aware rewards and the paper's dense (word-level) labels, from the critics through the span JSON parser to
the rewards placed on sampled tokens of a real tokenizer (the ``tiny_model_dir`` fixture)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer

from t2g_core.config.ppo import PPOConfig
from t2g_core.critics.code import CodeCritic
from t2g_core.critics.reference import ReferenceCritic
from t2g_core.critics.sandbox import SandboxLimits
from t2g_core.demo.summarization import reference_summary
from t2g_core.ppo.rewards import place_task_rewards, score
from t2g_core.ppo.scoring import CriticSource, anchor_token
from t2g_core.spans import ParsedFeedback, locate_words, parse_span_json
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
    "id": "r",
    "task": "summarization",
    "prompt": "I am named Gus. I live in Dakar.",
    "reference": reference_summary(FACTS),
    "meta": {"facts": FACTS},
}


def scored_rollout(tok, responses, words=False, critic=None):
    """Responses as sampled ids (+ EOS, right-padded), scored by ``critic`` exactly as the trainer does."""
    ro = text_rollout(tok, responses, [dict(ROW, id=f"r{i}") for i in range(len(responses))])
    return ro, score(ro, CriticSource(critic or ReferenceCritic()), tok, None, words=words)


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


# ---------------------------------------------------------------------------------------------- reference critic


def test_reference_critic_says_where_each_left_out_fact_belonged():
    response = "A person named Gus lives in Dakar, all ducks colored yellow."
    fb = ReferenceCritic().critique(dict(ROW, response=response))
    assert fb.missing == ("the count (2)", "the job (tailor)", "the day (Sunday)", "the food (bread)")
    gap_after_dakar, end = response.index(", all"), response.index(".")
    assert fb.missing_at == (gap_after_dakar, end, end, end)
    empty = ReferenceCritic().critique(dict(ROW, response=""))
    assert len(empty.missing) == 8 and set(empty.missing_at) == {0} and empty.word_scores == ()


def test_reference_critic_labels_every_word_for_the_dense_ablation():
    fb = ReferenceCritic().critique(dict(ROW, response="A person named Gus lives in Lima."))
    assert fb.word_scores == (
        ("A", 1.0),
        ("person", 1.0),
        ("named", 1.0),
        ("Gus", 1.0),
        ("lives", 1.0),
        ("in", 1.0),
        ("Lima", -1.0),
    )  # template words matching the reference are labelled too (the paper: "noise from function words")
    assert fb.good_spans == ["Gus"] and fb.poor_spans == ["Lima"]


# ---------------------------------------------------------------------------------------------- code critic


@pytest.fixture(scope="module")
def code_row():
    prompt = 'def add(a, b):\n    """Return a + b."""\n'
    tests = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n"
    return {"id": "c", "task": "code", "prompt": prompt, "tests": tests, "entry_point": "add"}


@pytest.mark.parametrize(
    "stub", ["    pass\n", "    ...\n", "    raise NotImplementedError\n", "    return\n", "", "# nothing yet\n"]
)
def test_code_critic_reports_an_unimplemented_function_as_missing(code_row, stub):
    fb = CodeCritic(SandboxLimits(timeout_s=3.0)).critique(dict(code_row, response=stub))
    assert fb.ok and fb.outcome == -1 and fb.missing == ("an implementation of add",) and fb.missing_at == (None,)


def test_code_critic_word_labels_blame_the_faulty_line_and_credit_the_rest(code_row):
    critic = CodeCritic(SandboxLimits(timeout_s=3.0), max_fault_lines=1)
    wrong = critic.critique(dict(code_row, response="    total = a\n    return total - b\n"))
    assert wrong.missing == () and wrong.poor_spans == ["return total - b"]
    assert wrong.word_scores == (("total", 1.0), ("a", 1.0), ("return", -1.0), ("total", -1.0), ("b", -1.0))
    right = critic.critique(dict(code_row, response="    return a + b\n"))
    assert right.outcome == 1 and right.word_scores == (("return", 1.0), ("a", 1.0), ("b", 1.0))


# ---------------------------------------------------------------------------------------------- parsing, alignment


def test_span_json_may_carry_word_scores_and_missing_content():
    fb = parse_span_json(
        json.dumps(
            {
                "critique": "Lima is wrong; the food is missing.",
                "word_score_list": [["lives", 1], ["in", 0], ["Lima", -1], {"word": "x", "score": 7}],
                "missing": ["the food"],
            }
        )
    )
    assert fb.ok and fb.word_scores == (("lives", 1.0), ("in", 0.0), ("Lima", -1.0), ("x", 1.0))  # clipped
    assert fb.missing == ("the food",) and fb.good_spans == [] and fb.poor_spans == []
    assert parse_span_json('{"critique": "c", "good_spans": []}').word_scores is None  # no word labels given
    bad = parse_span_json('{"critique": "c", "word_score_list": [["w"]]}')
    assert bad.status == "parse_error" and "word_score_list[0]" in bad.error


def test_locate_words_walks_the_response_in_order():
    text = "the cat and the dog"
    spans = locate_words(text, [("the", 1.0), ("the", -1.0), ("bird", 1.0), ("dog", 1.0)])
    got = [(s.start, s.end, s.label) for s in spans]
    assert got == [(0, 3, "positive"), (12, 15, "negative"), (None, None, "positive"), (16, 19, "positive")]


def test_anchor_token_holds_the_offset_or_follows_the_gap():
    offsets = [(0, 1), (2, 8), (8, 9), (9, 9)]  # "A person." + EOS (zero width)
    assert [anchor_token(offsets, at) for at in (0, 1, 2, 8, 9, None)] == [0, 1, 1, 2, 3, 3]


# ---------------------------------------------------------------------------------------------- placed rewards


def _cfg(**kw):
    return PPOConfig(**({"steps": 1, "batch_size": 4} | kw))


def test_omission_penalty_lands_where_the_content_belonged_or_at_the_end(tok):
    response = "A person named Gus lives in Dakar."
    ro, scored = scored_rollout(tok, [response])
    s = scored[0]
    stop = next(k for k, (a, b) in enumerate(s.offsets) if s.text[a:b] == ".")
    eos = int(ro.response_mask[0].sum()) - 1
    task, _, labels = place_task_rewards(scored, ro, _cfg(omission_penalty=1.0))
    assert float(task[0, stop]) == -6.0 and float(labels.sum()) == 2.0  # six facts missing, two stated right
    assert float(task[0].sum()) == -4.0
    task, terminal, _ = place_task_rewards(scored, ro, _cfg(omission_placement="end", omission_penalty=0.5))
    assert float(terminal[0]) == -3.0 and float(task[0, stop]) == 0.0  # at the end: the terminal's, every token's
    task, _, _ = place_task_rewards(scored, ro, _cfg(omission_penalty=0.0))
    assert float(task[0].sum()) == 2.0  # the old reward: omitting six facts cost nothing
    scalar, _, _ = place_task_rewards(scored, ro, _cfg(reward_mode="scalar"))
    assert scalar[0].nonzero().flatten().tolist() == [eos] and float(scalar[0, eos]) == -4.0


def test_dense_mode_places_the_critics_word_labels_on_their_tokens(tok):
    ro, spans = scored_rollout(tok, ["A person named Gus lives in Lima."])
    _, words = scored_rollout(tok, ["A person named Gus lives in Lima."], words=True)
    span_labels = torch.tensor(spans[0].labels)
    word_labels = torch.tensor(words[0].labels)
    assert int((span_labels != 0).sum()) == 2  # Gus, Lima
    assert int((word_labels > 0).sum()) >= 6 and int((word_labels < 0).sum()) >= 1  # most words are labelled
    text = words[0].text
    for k, (a, b) in enumerate(words[0].offsets):
        if text[a:b].strip() == "Lima":
            assert word_labels[k] == -1.0
    stop = next(k for k, (a, b) in enumerate(words[0].offsets) if text[a:b] == ".")
    omission = torch.zeros_like(word_labels)
    omission[stop] = -6.0  # six facts left out, charged at the full stop that ended the summary
    task, _, _ = place_task_rewards(words, ro, _cfg(reward_mode="dense"))
    assert torch.equal(task[0, : len(word_labels)], word_labels + omission)


def test_dense_mode_needs_a_source_that_labels_words(tok):
    class SpansOnly:
        def critique(self, row):
            return ParsedFeedback("c", good_spans=["Gus"])

    with pytest.raises(ValueError, match="word-level labels"):
        scored_rollout(tok, ["A person named Gus."], words=True, critic=SpansOnly())


@pytest.mark.parametrize("estimator", ["gae", "span_local", "span_bootstrap", "rloo", "grpo"])
def test_an_omission_the_critic_gives_no_place_reaches_every_token_under_every_estimator(tok, estimator):
    """Before, such an omission sat on the last token as a token reward: span_local credited it only to the tokens
    after the last span (A(omit) - A(no omit) was 0 on the tokens before it)."""
    from t2g_core.ppo.scoring import label_responses
    from t2g_core.rl import assemble_rewards, estimate_advantages

    response = "A person named Gus lives in Lima, a tailor."
    ro = text_rollout(tok, [response, response], [dict(ROW, id=f"r{i}") for i in range(2)])
    decoded = [(response, list(map(tuple, tok(response, return_offsets_mapping=True)["offset_mapping"]))) + ()] * 2
    decoded = [(t, [*o, (len(t), len(t))]) for t, o in decoded]  # the EOS, zero-width
    plain = ParsedFeedback("Lima is wrong.", ["Gus"], ["Lima"])
    omits = ParsedFeedback("Lima is wrong; the food is left out.", ["Gus"], ["Lima"], missing=("the food",))

    def advantages(first):
        scored = label_responses(decoded, [first, plain], None)
        cfg = _cfg(batch_size=2, group_size=2, advantage_estimator=estimator)
        task, terminal, _ = place_task_rewards(scored, ro, cfg)
        rewards = assemble_rewards(task, torch.zeros_like(task), ro.response_mask, 0.0, terminal)
        values = torch.zeros_like(task)
        return estimate_advantages(
            estimator,
            rewards,
            values,
            ro.response_mask,
            task=task,
            terminal=terminal,
            group=ro.group,
            gamma=1.0,
            lam=0.95,
        )[0]

    difference = (advantages(omits) - advantages(plain))[0][ro.response_mask[0]]
    assert (difference < 0).all(), difference.tolist()
