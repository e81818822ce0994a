"""Loading models by Hub id (through a Hugging Face cache the test builds, offline), dtype, and the pad-token policy."""

from __future__ import annotations

import pytest
import torch

from t2g_core.models.loading import (
    cached_commit,
    ensure_pad_token,
    is_hub_id,
    load_causal_lm,
    load_tokenizer,
    resolve_dtype,
    split_revision,
)

torch.set_num_threads(1)
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_names_and_revisions(tmp_path):
    assert split_revision("org/name@v1.0") == ("org/name", "v1.0")
    assert split_revision("org/name") == ("org/name", None)
    odd = tmp_path / "a@b"
    odd.mkdir()
    assert split_revision(odd) == (str(odd), None)  # a folder is never split
    assert is_hub_id("meta-llama/Llama-3.1-8B-Instruct") and is_hub_id("org/name@" + COMMIT)
    assert not is_hub_id(str(tmp_path)) and not is_hub_id("./org/name") and not is_hub_id("name")
    with pytest.raises(ValueError, match="NAME@REVISION"):
        split_revision("org/name@")


def test_a_hub_id_loads_offline_from_the_cache_in_bfloat16_with_a_reserved_pad_token(hf_home):
    tok = load_tokenizer("org/name")
    assert tok.pad_token == "<|reserved_special_token_0|>" and tok.padding_side == "left"
    assert tok.pad_token_id not in (tok.eos_token_id, tok.bos_token_id) and tok.eos_token_id != tok.bos_token_id
    model = load_causal_lm("org/name", dtype=torch.bfloat16, device="cpu", tokenizer=tok)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.config.pad_token_id == tok.pad_token_id
    assert model.get_input_embeddings().weight.shape[0] == len(tok)  # a reserved token: nothing was added
    assert cached_commit("org/name") == COMMIT and cached_commit(f"org/name@{COMMIT}") == COMMIT
    pinned = load_causal_lm(f"org/name@{COMMIT}", dtype=torch.float32, device="cpu")
    assert {p.dtype for p in pinned.parameters()} == {torch.float32}
    with pytest.raises(OSError):
        load_causal_lm("org/name@no-such-branch", device="cpu")


def test_the_model_digest_of_a_hub_id_is_its_cached_commit(hf_home):
    from t2g_core.stages.refs import model_digest

    assert model_digest("org/name") == f"id:org/name@{COMMIT}"
    assert model_digest("org/absent") == "id:org/absent"


def test_without_a_reserved_token_a_pad_is_added_and_the_embeddings_grow_deterministically(tmp_path):
    from t2g_core.models.tiny import TinySpec, build_tiny_model, train_tokenizer

    corpus = ["Cai lives in Quito with three gray dogs.", "The summary says Paris but the post says Quito."] * 40
    train_tokenizer(corpus, 300, tmp_path / "tok", pad=False)
    small = TinySpec(hidden_size=16, intermediate_size=32, num_heads=2)
    build_tiny_model(tmp_path / "m", tmp_path / "tok", small)
    tok = load_tokenizer(tmp_path / "m")
    assert tok.pad_token == "<|pad|>" and tok.pad_token_id == len(tok) - 1
    a = load_causal_lm(tmp_path / "m", dtype=torch.float32, device="cpu", tokenizer=tok)
    b = load_causal_lm(tmp_path / "m", dtype=torch.float32, device="cpu", tokenizer=load_tokenizer(tmp_path / "m"))
    emb = a.get_input_embeddings().weight
    assert emb.shape[0] == len(tok)
    assert torch.allclose(emb[-1], emb[:-1].mean(dim=0))  # the new row is the mean of the old ones
    assert torch.equal(emb, b.get_input_embeddings().weight)  # the same in every stage that loads this base


def test_a_distinct_pad_token_is_kept_and_pad_equal_to_eos_is_replaced(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert ensure_pad_token(tok).how == "kept"
    tok.pad_token = tok.eos_token  # the common "pad = eos" shortcut masks the real end of a response
    choice = ensure_pad_token(tok)
    assert choice.how == "reserved" and choice.token == "<|pad|>" and tok.pad_token_id != tok.eos_token_id


def test_pad_equal_to_eos_takes_an_unused_special_token_and_the_vocabulary_stays(smollm2_style_dir):
    """SmolLM2's layout: pad = EOS = <|im_end|>, and <|endoftext|> is a special token nothing uses. Adding a pad
    instead would resize the (tied) embeddings in every stage and put them in every adapter."""
    from safetensors import safe_open

    tok = load_tokenizer(smollm2_style_dir)
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id not in (tok.eos_token_id, tok.bos_token_id)
    with safe_open(str(smollm2_style_dir / "model.safetensors"), "pt") as f:
        rows = f.get_slice("model.embed_tokens.weight").get_shape()[0]
    assert len(tok) == rows  # nothing was added
    model = load_causal_lm(smollm2_style_dir, dtype=torch.float32, device="cpu", tokenizer=tok)
    assert model.get_input_embeddings().weight.shape[0] == rows and model.config.pad_token_id == tok.pad_token_id


def test_tokens_the_chat_template_writes_are_never_the_pad(pad_is_eos_dir):
    from transformers import AutoTokenizer

    from t2g_core.models.loading import template_token_ids

    tok = AutoTokenizer.from_pretrained(pad_is_eos_dir)
    roles = set(tok.convert_tokens_to_ids(["<|system|>", "<|user|>", "<|assistant|>"]))
    assert roles | {tok.eos_token_id, tok.bos_token_id} <= template_token_ids(tok)  # role markers are built by the
    choice = ensure_pad_token(tok)  # template from strings, not written literally: rendering finds them
    assert choice.how == "added" and choice.token == "<|pad|>" and choice.token_id == len(tok) - 1


def test_auto_dtype_is_float32_on_the_cpu():
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("bfloat16") == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("int8")


def test_the_ppo_policy_loads_a_hub_id_in_bfloat16_with_float32_trainable_weights(hf_home):
    from t2g_core.config.lora import LoRA
    from t2g_core.ppo.models import load_policy

    bundle = load_policy(
        "org/name",
        lora=LoRA(r=4, alpha=8),
        value_model="head",
        seed=0,
        dtype=torch.bfloat16,
    )
    frozen = {p.dtype for p in bundle.policy.parameters() if not p.requires_grad}
    policy_params, value_params = bundle.trainable_parameters()
    assert frozen == {torch.bfloat16} and {p.dtype for p in policy_params + value_params} == {torch.float32}
    assert bundle.loaded["commit"] == COMMIT and bundle.loaded["dtype"] == "bfloat16"
    assert bundle.loaded["pad_token"] == "<|reserved_special_token_0|>"
    q = torch.randint(5, 100, (2, 6))
    r = torch.randint(5, 100, (2, 4))
    ones = torch.ones_like(r, dtype=torch.bool)
    logprobs, values = bundle.model(q, torch.ones_like(q, dtype=torch.bool), r, ones, 1.0)
    assert logprobs.dtype == torch.float32 and values.dtype == torch.float32 and bool((logprobs < 0).all())
