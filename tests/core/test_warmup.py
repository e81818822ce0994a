"""The supervised warm-up: trained on the training prompts' references only, resumable, merged into a policy folder
that PPO starts from and keeps as its KL reference, and that the evaluation compares PPO with."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from t2g_core.config import HoldoutConfig, PPOConfig, WarmupConfig
from t2g_core.config.lora import LoRA
from t2g_core.config.stages import EvaluateSettings, PPOSettings, WarmupSettings
from t2g_core.stages.context import StageContext
from t2g_core.stages.refs import ModelsRef
from t2g_core.warmup import train_warmup, warmup_pairs

FAST = WarmupConfig(enabled=True, steps=4, batch_size=4, learning_rate=5e-3, save_steps=2, lora=LoRA(r=4, alpha=8))


@pytest.fixture
def feedback(tmp_path):
    from t2g_core.demo import make_demo_feedback
    from t2g_core.workspace import Workspace

    df = make_demo_feedback("summarization", 24, seed=0)
    df.loc[df.index[:3], "reference"] = None  # rows without a reference are left out, and counted
    return Workspace.at(tmp_path / "ws").store.write("feedback", "k", df, "feedback")


def _tokenizer(path):
    from t2g_core.models.loading import load_tokenizer

    return load_tokenizer(path, padding_side=None)


def test_pairs_are_the_training_prompts_references_never_the_held_out_ones(feedback, tiny_model_dir, tmp_path):
    from t2g_core.ppo.run import prepare_run
    from t2g_core.stages.holdout import training_rows
    from t2g_core.stages.io import read

    holdout = HoldoutConfig(eval_fraction=0.25, seed=3)
    rows = training_rows(feedback, WarmupSettings(warmup=FAST, holdout=holdout))
    pairs = warmup_pairs(rows, _tokenizer(tiny_model_dir), FAST)
    run = prepare_run(PPOSettings(holdout=holdout), tmp_path / "ppo", read(feedback, "feedback"), tiny_model_dir)
    held_out = set(pd.read_parquet(run / "eval.parquet")["id"])
    ppo_train = set(pd.read_parquet(run / "prompts.parquet")["id"])
    assert len(held_out) == 6 and not set(pairs.ids) & held_out  # the split PPO holds out is never warmed up on
    assert set(pairs.ids) <= ppo_train and len(pairs.ids) + pairs.no_reference == len(ppo_train)
    with_reference = rows[rows["reference"].notna()]
    assert pairs.no_reference == len(rows) - len(with_reference) > 0
    first = with_reference.iloc[0]
    prompt, reference = pairs.pairs[0]
    assert reference == first["reference"] and first["prompt"] in prompt and prompt.endswith("<|assistant|>\n")


def test_pairs_above_the_token_budget_are_left_out_not_cut(feedback, tiny_model_dir):
    from t2g_core.stages.holdout import training_rows

    rows = training_rows(feedback, WarmupSettings(warmup=FAST))
    tok = _tokenizer(tiny_model_dir)
    lengths = [len(tok(p + r + tok.eos_token)["input_ids"]) for p, r in warmup_pairs(rows, tok, FAST).pairs]
    budget = sorted(lengths)[len(lengths) // 2]
    short = warmup_pairs(rows, tok, FAST.model_copy(update={"max_length": budget}))
    assert short.too_long == sum(n > budget for n in lengths) > 0 and len(short.pairs) == len(lengths) - short.too_long
    with pytest.raises(ValueError, match="no \\(prompt, reference\\) pair"):
        train_warmup(FAST, tiny_model_dir, warmup_pairs(rows, tok, FAST.model_copy(update={"max_length": 16})), "x")


class _KillAt:
    def __init__(self, step: int):
        from transformers import TrainerCallback

        class Kill(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                if state.global_step + 1 == step:
                    raise KeyboardInterrupt

        self.callback = Kill()


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_a_killed_warm_up_resumes_to_the_same_merged_policy(feedback, tiny_model_dir, tmp_path):
    from t2g_core.stages.holdout import training_rows

    torch.set_num_threads(1)
    pairs = warmup_pairs(training_rows(feedback, WarmupSettings(warmup=FAST)), _tokenizer(tiny_model_dir), FAST)
    straight = train_warmup(FAST, tiny_model_dir, pairs, tmp_path / "straight")
    assert straight.global_step == 4 and straight.resumed_from is None and len(straight.losses) == 4
    with pytest.raises(KeyboardInterrupt):
        train_warmup(FAST, tiny_model_dir, pairs, tmp_path / "killed", callbacks=[_KillAt(3).callback])
    assert not (tmp_path / "killed" / "policy").exists()  # nothing half-written looks finished
    resumed = train_warmup(FAST, tiny_model_dir, pairs, tmp_path / "killed")
    assert resumed.resumed_from.endswith("checkpoint-2") and resumed.global_step == 4
    assert resumed.losses == pytest.approx(straight.losses[2:], rel=1e-5)
    a, b, start = _weights(straight.policy_dir), _weights(resumed.policy_dir), _weights(tiny_model_dir)
    assert a.keys() == b.keys() == start.keys()  # merged: a plain model folder, no adapter left
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    assert any(not torch.equal(a[k], start[k]) for k in a)  # the LoRA was merged into the weights
    assert not (tmp_path / "killed" / "checkpoints").exists()
    again = train_warmup(FAST, tiny_model_dir, pairs, tmp_path / "killed")  # finished: reused, not retrained
    assert again.global_step == 4 and again.resumed_from == resumed.resumed_from


def test_a_warm_up_record_cut_short_is_not_finished_and_trains_again(tmp_path):
    """A ``warmup.json`` a kill or a full disk cut short means the warm-up is not complete: no crash, it trains."""
    from t2g_core.warmup import WARMUP_META, finished

    record = tmp_path / "policy" / WARMUP_META
    record.parent.mkdir()
    meta = {"start": "base", "global_step": 4, "train_seconds": 1.0, "n_pairs": 8}
    text = json.dumps(meta | {"config": FAST.model_dump(mode="json")}, indent=2)
    record.write_text(text, encoding="utf-8")
    assert finished(tmp_path, FAST, "base").global_step == 4 and finished(tmp_path, FAST, "other") is None
    record.write_text(text[: len(text) // 2], encoding="utf-8")
    assert finished(tmp_path, FAST, "base") is None


def _reference_logprob(model, tok, prompt: str, reference: str) -> float:
    ids = tok(prompt + reference + tok.eos_token, add_special_tokens=False, return_tensors="pt")["input_ids"]
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
    return float(logp[n_prompt - 1 :].gather(-1, ids[0, n_prompt:, None]).sum())


def test_the_warm_up_stage_returns_the_policy_ppo_starts_from_and_keeps_as_its_reference(
    feedback, tiny_model_dir, tmp_path
):
    from transformers import AutoModelForCausalLM

    from t2g_core.ppo.models import load_policy
    from t2g_core.stages import warmup
    from t2g_core.stages.evaluate import pipeline_policies
    from t2g_core.stages.holdout import training_rows
    from t2g_core.stages.refs import PolicyRef

    torch.set_num_threads(1)
    models = ModelsRef.of(tiny_model_dir, tiny_model_dir)
    settings = WarmupSettings(warmup=FAST.model_copy(update={"steps": 12}))
    ctx = StageContext.keyed(tmp_path / "ws", "warmup-test")
    start = warmup.warm_up(feedback, models, settings, ctx)
    assert start.base == models.base and start.policy != models.policy and start.policy_digest != models.policy_digest
    assert Path(start.policy).name == "policy" and (Path(start.policy) / "config.json").is_file()

    tok = _tokenizer(start.policy)
    pairs = warmup_pairs(training_rows(feedback, settings), tok, settings.warmup).pairs[:4]
    warmed = AutoModelForCausalLM.from_pretrained(start.policy).eval()
    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    gain = [_reference_logprob(warmed, tok, p, r) - _reference_logprob(before, tok, p, r) for p, r in pairs]
    assert min(gain) > 0  # it learnt the references

    bundle = load_policy(start.policy, lora=LoRA(r=4, alpha=8), value_model="head", seed=0)
    ids = tok(pairs[0][0] + pairs[0][1], add_special_tokens=False, return_tensors="pt")["input_ids"]
    q, r = ids[:, :-8], ids[:, -8:]
    ones = torch.ones_like
    with torch.no_grad():
        ref_logprobs, _ = bundle.model(q, ones(q), r, ones(r), 1.0, reference=True)
        direct = torch.log_softmax(warmed(input_ids=ids).logits[0, -9:-1].float(), -1).gather(-1, r[0, :, None])[:, 0]
    torch.testing.assert_close(ref_logprobs[0], direct, rtol=1e-4, atol=1e-4)  # PPO's KL reference: the SFT model

    policy = PolicyRef(adapter_dir="a", run_dir=str(tmp_path), digest="d", steps=1, history_path="h")
    chosen = pipeline_policies(feedback, start, policy, EvaluateSettings())
    assert chosen.baseline == "warm_start" and chosen.models["warm_start"] == start.policy

    again = warmup.warm_up(feedback, models, settings, ctx)  # a finished warm-up under this key is reused
    assert again.policy == start.policy and again.policy_digest == start.policy_digest


def test_ppo_settings_are_untouched_by_the_warm_up():
    """The warm-up's section is its own: PPO reads neither it nor the warm-up's LoRA settings."""
    assert "warmup" not in PPOSettings.sections() and PPOConfig().lora.r == 16
    assert WarmupSettings.sections() == ("warmup", "holdout", "models")
