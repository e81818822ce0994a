"""Reward-model training: completion-only loss, checkpoint resume, and a tiny RM that learns (CPU, tiny model)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from t2g_core.config.reward_model import RewardModelConfig
from t2g_core.reward_model.train import make_trainer, train_rm
from tests.core._rm_rows import ITEMS, lora_bytes, rm_rows


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_completion_only_loss_masks_every_prompt_token(tiny_model_dir, tok, tmp_path):
    cfg = RewardModelConfig(kind="generative", val_fraction=0.0, max_steps=1)
    df = rm_rows(tok, cfg)
    trainer = make_trainer(cfg, tiny_model_dir, df, tmp_path, progress=False)
    for i, row in enumerate(df.itertuples()):
        ex = trainer.train_dataset[i]
        ids, labels = ex["input_ids"], ex["labels"]
        n_prompt = len(tok(row.rm_prompt, add_special_tokens=False)["input_ids"])
        assert ids[:n_prompt] == tok(row.rm_prompt, add_special_tokens=False)["input_ids"]
        assert labels[:n_prompt] == [-100] * n_prompt, "prompt tokens must not be in the loss"
        assert labels[n_prompt:] == ids[n_prompt:], "every target token (and the EOS) is in the loss"
        assert tok.decode(labels[n_prompt:]) == row.rm_target
        assert labels[-1] == tok.eos_token_id
    # the LoRA adapter is on the configured modules only and the base is frozen
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert {n.split(".lora_")[0].rsplit(".", 1)[1] for n in trainable} == set(cfg.lora.target_modules)


def test_an_added_pad_token_does_not_put_the_embeddings_in_the_adapter(pad_is_eos_dir, tmp_path):
    """The base's pad is its EOS and no special token is free, so a pad is added and the embeddings resized; those
    rows are rebuilt at every load, so the adapter holds the LoRA weights only (PEFT's default added the whole
    embedding matrix)."""
    from transformers import AutoTokenizer

    from t2g_core.reward_model.scoring import load_reward_model

    torch.set_num_threads(1)
    cfg = RewardModelConfig(kind="generative", val_fraction=0.0, max_steps=2, save_steps=1, batch_size=2)
    df = rm_rows(AutoTokenizer.from_pretrained(pad_is_eos_dir), cfg)
    result = train_rm(cfg, pad_is_eos_dir, df, tmp_path, progress=False)
    for folder in (result.adapter_dir, tmp_path / "checkpoints" / "checkpoint-2"):
        on_disk, lora, others = lora_bytes(folder)
        assert others == [] and lora > 0
        assert on_disk <= 1.1 * lora, (folder, on_disk, lora)
    model, rm_tok = load_reward_model(result.adapter_dir, device="cpu")  # the base is resized again when loaded
    assert rm_tok.pad_token == "<|pad|>" and model.get_input_embeddings().weight.shape[0] == len(rm_tok)
    longer = train_rm(cfg.model_copy(update={"max_steps": 3}), pad_is_eos_dir, df, tmp_path, progress=False)
    assert longer.resumed_from.endswith("checkpoint-2") and longer.global_step == 3  # resumes from such a checkpoint


class _KillAt:
    """A TrainerCallback that dies after optimizer step ``step`` (before that step could be checkpointed)."""

    def __new__(cls, step):
        from transformers import TrainerCallback

        class Kill(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == step:
                    raise KeyboardInterrupt(f"killed at step {step}")

        return Kill()


def _adapter_state(path):
    from safetensors.torch import load_file

    return load_file(str(path / "adapter_model.safetensors"))


@pytest.mark.slow  # trains the reward model twice
def test_resume_after_kill_continues_step_count_and_optimizer_state(tiny_model_dir, tok, tmp_path):
    torch.set_num_threads(1)
    cfg = RewardModelConfig(
        kind="generative",
        val_fraction=0.0,
        max_steps=4,
        save_steps=2,
        batch_size=2,
        lora={"dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
        learning_rate=1e-2,
        lr_scheduler="linear",
        warmup_ratio=0.0,
    )
    df = rm_rows(tok, cfg)
    straight = train_rm(cfg, tiny_model_dir, df, tmp_path / "straight", progress=False)
    assert straight.global_step == 4 and straight.resumed_from is None

    with pytest.raises(KeyboardInterrupt):
        train_rm(cfg, tiny_model_dir, df, tmp_path / "killed", callbacks=[_KillAt(3)], progress=False)
    ckpts = sorted(p.name for p in (tmp_path / "killed" / "checkpoints").glob("checkpoint-*"))
    assert ckpts == ["checkpoint-2"]

    resumed = train_rm(cfg, tiny_model_dir, df, tmp_path / "killed", progress=False)
    assert resumed.resumed_from is not None and resumed.resumed_from.endswith("checkpoint-2")
    assert resumed.global_step == 4
    assert sorted({int(h["step"]) for h in resumed.history if "rm/loss" in h}) == [3, 4]
    # Same weights as the uninterrupted run: Adam moments, LR schedule, data order and RNG were all restored
    # (a fresh optimizer at step 3 would land elsewhere).
    a, b = _adapter_state(straight.adapter_dir), _adapter_state(resumed.adapter_dir)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    losses_a = [h["rm/loss"] for h in straight.history if "rm/loss" in h][2:]
    losses_b = [h["rm/loss"] for h in resumed.history if "rm/loss" in h]
    assert losses_a == pytest.approx(losses_b, rel=1e-5)
    # a finished run is not retrained; a changed config is
    again = train_rm(cfg, tiny_model_dir, df, tmp_path / "killed", progress=False)
    assert again.global_step == 4 and again.history == []


@pytest.mark.slow
def test_tiny_rm_overfits_a_handful_of_examples_until_its_spans_match_gold(tiny_model_dir, tok, tmp_path):
    """The whole loop learns: data -> SFT with LoRA -> adapter on disk -> load -> generate -> parse -> align ->
    metrics."""
    from t2g_core.reward_model.evaluate import eval_items, evaluate_rm
    from t2g_core.reward_model.scoring import load_reward_model

    torch.set_num_threads(1)
    cfg = RewardModelConfig(
        kind="generative",
        val_fraction=0.0,
        max_steps=150,
        save_steps=1000,
        batch_size=4,
        lora={
            "dropout": 0.0,
            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        },
        learning_rate=1e-2,
        lr_scheduler="constant",
        warmup_ratio=0.0,
        max_new_tokens=64,
    )
    df = rm_rows(tok, cfg)
    result = train_rm(cfg, tiny_model_dir, df, tmp_path, progress=False)
    losses = [h["rm/loss"] for h in result.history if "rm/loss" in h]
    assert losses[-1] < losses[0]
    model, rm_tok = load_reward_model(result.adapter_dir, device="cpu")
    fb = pd.DataFrame([{"id": f"sum-{i}", "response": r, "meta": None} for i, (_p, r, *_x) in enumerate(ITEMS)])
    report = evaluate_rm(model, rm_tok, eval_items(df, fb, rm_tok.eos_token, split="train"), cfg)
    assert report.metrics["json_valid_rate"] == 1.0, report.rows["generated"].tolist()
    assert report.metrics["span_f1"] == 1.0 and report.metrics["token_f1"] == 1.0
    assert report.metrics["unmatched_span_rate"] == 0.0
    assert report.metrics["rouge_l"] == pytest.approx(1.0)
    # and the untrained base does not (the metrics can fail) ...
    base, base_tok = load_reward_model(tiny_model_dir, device="cpu")
    items = eval_items(df, fb, base_tok.eos_token, split="train")
    free = evaluate_rm(base, base_tok, items, cfg.model_copy(update={"grounded_decoding": False}))
    assert free.metrics["json_valid_rate"] == 0.0 and free.metrics["span_f1"] < 0.5
    # ... though grounded decoding keeps even its quotes inside the response
    grounded = evaluate_rm(base, base_tok, items, cfg.model_copy(update={"max_new_tokens": 96}))
    assert grounded.metrics["unmatched_span_rate"] == 0.0 and grounded.metrics["span_f1"] < 0.5
