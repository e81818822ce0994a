"""The tiny model factory: a real tokenizer and model that load with from_pretrained and generate."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from t2g_core.models.tiny import BOS, EOS, PAD


def test_fixture_round_trip_generates(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert (tiny_model_dir / "model.safetensors").exists()
    text = tok.apply_chat_template(
        [{"role": "user", "content": "I am Cai."}], tokenize=False, add_generation_prompt=True
    )
    batch = tok([text, text + " x"], return_tensors="pt", padding=True)
    torch.manual_seed(0)
    out = model.generate(**batch, max_new_tokens=5, do_sample=True)
    assert out.shape[0] == 2 and out.shape[1] > batch["input_ids"].shape[1]
    assert isinstance(tok.decode(out[0, batch["input_ids"].shape[1] :]), str)


def test_special_tokens_and_chat_template(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == (BOS, EOS, PAD)
    assert len({tok.bos_token_id, tok.eos_token_id, tok.pad_token_id}) == 3
    msgs = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert text == f"{BOS}<|user|>\nhello{EOS}<|assistant|>\nhi{EOS}"
    gen = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    assert gen.endswith("<|assistant|>\n")
    # BOS is written by the template only: tokenizing the rendered text never adds a second one
    ids = tok(gen)["input_ids"]
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    assert tok.decode(tok("Quito says hi", add_special_tokens=False)["input_ids"]) == "Quito says hi"
