"""Reward-model scoring: one prompt builder everywhere, left-padded batches, failed parses are statuses."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from t2g_core.config.reward_model import RewardModelConfig
from t2g_core.reward_model import scoring
from t2g_core.reward_model.data import build_rm_data
from t2g_core.reward_model.evaluate import eval_items
from t2g_core.reward_model.scoring import RewardModelScorer, generate_texts, load_reward_model, score

PROMPTS = [
    "I am Cai. I live in Quito. I work as a coach.",
    "I am Bo. I live in Lima. I have 3 pets. All of them are dogs. Their fur is gray. I work as a baker.",
    "Question: What is the capital of France?",
]
RESPONSES = ["Cai lives in Paris.", "Bo lives in Lima with 3 gray dogs and works as a judge on Sunday.", "Paris."]


@pytest.fixture(scope="module")
def rm(tiny_model_dir):
    torch.set_num_threads(1)
    return load_reward_model(tiny_model_dir, device="cpu")


def test_score_train_and_eval_use_one_prompt_builder(rm, monkeypatch):
    model, tok = rm
    cfg = RewardModelConfig(kind="generative", val_fraction=0.99)
    fb = pd.DataFrame(
        [
            {
                "id": f"x{i}",
                "task": "summarization",
                "prompt": p,
                "response": r,
                "critique": None,
                "reference": None,
                "tests": None,
                "entry_point": None,
                "meta": None,
            }
            for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES, strict=True))
        ]
    )
    ann = pd.DataFrame(
        [
            {
                "id": f"x{i}",
                "annotator": "a",
                "critique": "c",
                "good_spans": [],
                "poor_spans": [],
                "reasoning": None,
                "status": "ok",
                "error": None,
                "raw": None,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "latency_s": 0.0,
            }
            for i in range(len(PROMPTS))
        ]
    )
    rm_df, _ = build_rm_data(fb, ann, tok, cfg)
    seen: list[str] = []

    def capture(model_, tok_, texts, cfg_, responses=None):
        seen.extend(texts)
        return generate_texts(model_, tok_, texts, cfg_.model_copy(update={"max_new_tokens": 8}), responses)

    monkeypatch.setattr(scoring, "generate_texts", capture)
    score(PROMPTS, RESPONSES, model=model, tokenizer=tok, task="summarization", cfg=cfg)
    train_prompts = rm_df.sort_values("id")["rm_prompt"].tolist()
    eval_prompts = [it.rm_prompt for it in eval_items(rm_df, fb, tok.eos_token, split="validation")]
    assert seen == train_prompts
    assert sorted(eval_prompts) == sorted(train_prompts)


def test_left_padded_batches_generate_what_single_prompts_do(rm):
    model, tok = rm
    cfg = RewardModelConfig(kind="generative", max_new_tokens=12, score_batch_size=3)
    texts = [scoring.build_rm_prompt(tok, "summarization", p, r, 384) for p, r in zip(PROMPTS, RESPONSES, strict=True)]
    batched = generate_texts(model, tok, texts, cfg)
    single = [generate_texts(model, tok, [t], cfg.model_copy(update={"score_batch_size": 1})) for t in texts]
    assert len({len(tok(t)["input_ids"]) for t in texts}) == 3  # really padded
    assert tok.padding_side == "left"
    assert batched.texts == [s.texts[0] for s in single]
    assert batched.n_new_tokens == [s.n_new_tokens[0] for s in single]
    assert all(0 < n <= 12 for n in batched.n_new_tokens)
    assert batched.tokens_per_second > 0


def test_an_untrained_model_gives_parse_errors_not_exceptions(rm):
    model, tok = rm
    out = score(
        PROMPTS,
        RESPONSES,
        model=model,
        tokenizer=tok,
        task="summarization",
        cfg=RewardModelConfig(kind="generative", max_new_tokens=10),
    )
    assert len(out) == 3
    for parsed in out:
        assert parsed.status == "parse_error"
        assert parsed.raw is not None and parsed.error
    assert any("max_new_tokens=10" in p.error for p in out)


def test_a_generation_nested_deeper_than_the_stack_is_invalid_json_and_a_parse_error():
    from t2g_core.reward_model.evaluate import strict_json_valid
    from t2g_core.reward_model.scoring import parse_generation

    deep = '{"good_spans": ' + "[" * 100_000 + "]" * 100_000 + ', "poor_spans": []}'
    assert strict_json_valid(deep) is False
    assert parse_generation(deep, hit_limit=False, max_new_tokens=192).status == "parse_error"


def test_mismatched_lengths_are_a_clear_error(rm):
    model, tok = rm
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        score(
            PROMPTS[:2], RESPONSES[:1], model=model, tokenizer=tok, task="qa", cfg=RewardModelConfig(kind="generative")
        )


def test_critique_batch_keeps_row_order_across_tasks(tiny_model_dir, monkeypatch):
    cfg = RewardModelConfig(kind="generative", max_new_tokens=8)
    scorer = RewardModelScorer(tiny_model_dir, cfg, device="cpu")
    rows = [
        {"task": "summarization", "prompt": PROMPTS[0], "response": RESPONSES[0]},
        {"task": "qa", "prompt": PROMPTS[2], "response": RESPONSES[2]},
        {"task": "summarization", "prompt": PROMPTS[1], "response": RESPONSES[1]},
    ]
    batch = scorer.critique_batch(rows)
    alone = [scorer.score([r["prompt"]], [r["response"]], r["task"])[0] for r in rows]
    assert [b.raw for b in batch] == [a.raw for a in alone]

    def echo(
        model_, tok_, texts, cfg_, responses=None
    ):  # "generate" the prompt itself, to see which prompt each row got
        return scoring.Generation(list(texts), [1] * len(texts), [False] * len(texts), 1.0)

    monkeypatch.setattr(scoring, "generate_texts", echo)
    raws = [p.raw for p in scorer.critique_batch(rows)]
    for raw, row in zip(raws, rows, strict=True):
        assert raw == scoring.build_rm_prompt(
            scorer.tokenizer, row["task"], row["prompt"], row["response"], cfg.max_prompt_tokens
        )


def test_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_reward_model(tmp_path / "nope")
