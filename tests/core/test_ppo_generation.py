"""Rollout generation backends: batched ``generate`` samples the untruncated distribution, reproducibly; vLLM is
refused clearly where it is not installed; the trainer runs with each backend available here."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import torch

from t2g_core.config.lora import LoRA
from t2g_core.config.ppo import PPOConfig
from t2g_core.ppo.generation import HFBackend, make_backend, pad_after_eos, rollout_sampling
from t2g_core.rl.logprobs import removed_tokens

torch.set_num_threads(1)


def test_pad_after_eos_cuts_each_row_after_its_first_eos():
    out = pad_after_eos([[5, 2, 7, 2], [6, 6, 6], []], eos=2, pad=0)
    assert out.tolist() == [[5, 2, 0], [6, 6, 6], [0, 0, 0]]


@pytest.fixture
def truncating_model(tiny_model_dir, tmp_path):
    """The tiny model with a generation_config.json that truncates and cools sampling (as Llama 3.1 Instruct's
    temperature 0.6 / top_p 0.9 does)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    gen = json.loads((folder / "generation_config.json").read_text())
    gen |= {"do_sample": True, "temperature": 0.2, "top_p": 0.3, "top_k": 5, "repetition_penalty": 1.3}
    (folder / "generation_config.json").write_text(json.dumps(gen))
    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(folder).eval(), tok


def test_generate_samples_softmax_of_logits_over_tau_whatever_the_model_ships(truncating_model):
    model, tok = truncating_model
    cfg = PPOConfig(sampling={"temperature": 0.7, "max_new_tokens": 5})
    gen = rollout_sampling(cfg, tok)
    gen.output_scores = gen.output_logits = gen.return_dict_in_generate = True
    enc = tok(["Cai lives in", "A much longer post about Quito and dogs"], padding=True, return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**enc, generation_config=gen)
    for scores, logits in zip(out.scores, out.logits, strict=True):
        assert torch.isfinite(scores).all()  # nothing was cut away by top-k / top-p
        assert torch.allclose(scores, logits / 0.7, atol=1e-5)  # tau applied once, the model's 0.2 ignored


def test_the_hf_backend_is_reproducible_per_stream_and_pads_after_eos(truncating_model):
    model, tok = truncating_model
    backend = HFBackend(PPOConfig(sampling={"temperature": 1.0, "max_new_tokens": 12}), tok)
    enc = tok(["Cai lives in", "The post says"] * 3, padding=True, return_tensors="pt")
    a = backend.generate(model, enc["input_ids"], enc["attention_mask"], [0] * 6, stream=11)
    b = backend.generate(model, enc["input_ids"], enc["attention_mask"], [0] * 6, stream=11)
    c = backend.generate(model, enc["input_ids"], enc["attention_mask"], [0] * 6, stream=12)
    assert torch.equal(a, b) and not torch.equal(a, c)
    for row in a.tolist():
        if tok.eos_token_id in row:
            assert set(row[row.index(tok.eos_token_id) + 1 :]) <= {tok.pad_token_id}


def test_vllm_is_refused_with_the_way_out_when_not_installed(tiny_model_dir, tmp_path):
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here")
    cfg = PPOConfig(generation_backend="vllm")
    with pytest.raises(ImportError, match=r"text2grad\[vllm\].*generation_backend=hf"):
        make_backend(cfg, None, model_ref=str(tiny_model_dir), dtype=torch.bfloat16, workdir=tmp_path)


class _EdgeWords:
    def critique(self, row):
        from t2g_core.spans import ParsedFeedback

        words = row["response"].split()
        return ParsedFeedback(critique="edges", good_spans=words[-1:], poor_spans=words[:1])


def test_the_trainer_runs_with_batched_generate_and_its_first_minibatch_is_on_policy(tiny_model_dir, tmp_path):
    from t2g_core.ppo import CriticSource, train

    prompts = pd.DataFrame(
        {"id": [f"p{i}" for i in range(4)], "task": "summarization", "prompt": [f"Post {i}: Cai." for i in range(4)]}
    )
    cfg = PPOConfig(
        steps=2,
        batch_size=4,
        minibatches=2,
        ppo_epochs=1,
        sampling={"max_new_tokens": 8},
        value_model="head",
        generation_backend="hf",
        micro_batch_size=3,
        gradient_checkpointing=True,
        save_every=1,
    )
    res = train(cfg, tiny_model_dir, prompts, tmp_path / "run", reward_source=CriticSource(_EdgeWords()))
    assert res.steps_done == 2
    assert all(h["ppo/first_ratio"] == pytest.approx(1.0, abs=1e-5) for h in res.history)
    info = json.loads((tmp_path / "run" / "models.json").read_text())
    assert info["generation_backend"] == "hf" and info["policy"]["dtype"] == "float32"


# ---------------------------------------------------------------------------------- sampling controls (top-k, top-p)
TRUNCATED = {"temperature": 0.8, "top_k": 12, "top_p": 0.8}


def _bundle(model_dir):
    from t2g_core.ppo.models import load_policy

    return load_policy(model_dir, lora=LoRA(r=4, alpha=8), value_model="head", seed=0)


def _prompts(tok):
    from t2g_core.policy_prompts import render_policy_prompt

    texts = [render_policy_prompt(tok, "summarization", p) for p in ("Hi.", "A longer post about Cai and Quito.")]
    return tok(texts, add_special_tokens=False, padding=True, return_tensors="pt")


def _rollout(enc, ids, tok):
    from t2g_core.ppo.rollout import Rollout
    from t2g_core.ppo.sampling import response_mask_after_eos

    mask, has_eos = response_mask_after_eos(ids, tok.eos_token_id)
    rows = [{"id": str(i)} for i in range(len(ids))]
    return Rollout(rows, list(range(len(ids))), enc["input_ids"], enc["attention_mask"].bool(), ids, mask, has_eos)


def _full_logits(bundle, ro):  # (B, T, V): the plain twin of the chunked pass, the position before each token
    from t2g_core.rl.logprobs import position_ids_from_mask

    ids = torch.cat([ro.query_ids, ro.response_ids], 1)
    attn = torch.cat([ro.query_mask, ro.response_mask], 1).long()
    with torch.no_grad(), bundle.policy.disable_adapter():
        logits = bundle.policy(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn)).logits
    return logits[:, ro.query_ids.shape[1] - 1 : -1]


def test_stored_old_logprobs_are_the_probabilities_the_exact_sampler_drew_with(tiny_model_dir):
    from t2g_core.ppo.experience import old_ref_values
    from t2g_core.ppo.sampling import sample_responses

    bundle, cfg = _bundle(tiny_model_dir), PPOConfig(sampling={**TRUNCATED, "max_new_tokens": 12}, value_model="head")
    tok = bundle.tokenizer
    enc = _prompts(tok)
    kw = {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id, "seeds": [3, 4]}
    ids, drawn_lp = sample_responses(
        bundle.policy, enc["input_ids"], enc["attention_mask"], max_new_tokens=12, sampling=cfg.sampling,
        return_logprobs=True, **kw,
    )  # fmt: skip
    ro = _rollout(enc, ids, tok)
    old, ref, _, _ = old_ref_values(bundle.model, ro, cfg, "cpu")
    m = ro.response_mask
    assert torch.allclose(old[m], drawn_lp[m], atol=1e-4)  # exp(old_logprob) = the sampler's probability
    whole = cfg.model_copy(update={"sampling": cfg.sampling.model_copy(update={"top_k": 0, "top_p": 1.0})})
    untruncated, _ = old_ref_values(bundle.model, ro, whole, "cpu")[:2]
    assert not torch.allclose(untruncated[m], drawn_lp[m], atol=1e-2)  # the truncation is what makes them agree
    scores = _full_logits(bundle, ro) / cfg.sampling.temperature
    cut = removed_tokens(scores.flatten(0, 1), cfg.sampling.top_k, cfg.sampling.top_p).view(scores.shape)
    assert not cut.gather(-1, ids[..., None]).squeeze(-1)[m].any()  # every drawn token is inside the set


def test_the_hf_backend_samples_the_set_and_distribution_the_log_probs_use(truncating_model, tiny_model_dir):
    """transformers' warpers (with the model's own generation_config.json overridden) and the chunked log-prob
    pass agree on the sampling distribution: log softmax of generate's scores at the drawn token is the old
    log-prob the trainer stores."""
    from t2g_core.ppo.sampling import response_mask_after_eos
    from t2g_core.rl.logprobs import truncate_

    model, tok = truncating_model
    bundle, cfg = _bundle(tiny_model_dir), PPOConfig(sampling={**TRUNCATED, "max_new_tokens": 10})
    gen = rollout_sampling(cfg, tok)
    gen.output_scores = gen.output_logits = gen.return_dict_in_generate = True
    enc = _prompts(tok)
    torch.manual_seed(0)
    out = model.generate(**enc, generation_config=gen)
    new = out.sequences[:, enc["input_ids"].shape[1] :]
    scores, logits = torch.stack(out.scores, 1), torch.stack(out.logits, 1)  # (B, T, V)
    expected = truncate_((logits / cfg.sampling.temperature).flatten(0, 1), cfg.sampling).view(scores.shape)
    assert torch.equal(torch.isinf(scores), torch.isinf(expected))  # the same set: tau, then top-k, then top-p
    assert torch.allclose(scores[torch.isfinite(scores)], expected[torch.isfinite(expected)], atol=1e-5)
    mask, _ = response_mask_after_eos(new, tok.eos_token_id)
    drawn = torch.log_softmax(scores, -1).gather(-1, new[..., None]).squeeze(-1)
    assert torch.isfinite(drawn[mask]).all()  # nothing outside the set was drawn
    with torch.no_grad():
        old, _ = bundle.model(enc["input_ids"], enc["attention_mask"].bool(), new, mask, cfg.sampling)
    assert torch.allclose(old[mask], drawn[mask], atol=1e-4)


def test_vllm_sampling_parameters_carry_the_same_distribution():
    from t2g_core.ppo.generation import vllm_sampling

    got = vllm_sampling(PPOConfig(sampling={**TRUNCATED, "max_new_tokens": 7}), eos_token_id=2, seed=5)
    assert got | {} == {
        "temperature": 0.8, "top_k": 12, "top_p": 0.8, "min_p": 0.0, "repetition_penalty": 1.0, "max_tokens": 7,
        "seed": 5, "ignore_eos": True, "stop_token_ids": [2],
    }  # fmt: skip
    default = vllm_sampling(PPOConfig(), eos_token_id=2, seed=5)
    assert (default["temperature"], default["top_k"], default["top_p"]) == (1.0, -1, 1.0)  # vLLM's "no top-k" is -1


def test_the_reference_is_truncated_alike_so_the_kl_starts_at_zero_and_stays_finite(tiny_model_dir):
    """The KL penalty compares the two models as they would be sampled: the reference's log-probs use the same
    temperature, top-k and top-p over its own set, so at the start (policy = reference) every token's KL is 0; a
    token outside the reference's set keeps a finite log-prob, renormalised over that set and the token."""
    from t2g_core.rl import per_token_kl

    bundle, cfg = _bundle(tiny_model_dir), PPOConfig(sampling=TRUNCATED)
    tok = bundle.tokenizer
    enc = _prompts(tok)
    ids = torch.randint(5, len(tok) - 1, (2, 6), generator=torch.Generator().manual_seed(0))  # mostly outside top-k
    ro = _rollout(enc, ids, tok)
    args, m = (ro.query_ids, ro.query_mask, ro.response_ids, ro.response_mask), ro.response_mask
    with torch.no_grad():
        policy, _ = bundle.model(*args, cfg.sampling)
        ref, _ = bundle.model(*args, cfg.sampling, reference=True)
    assert torch.equal(per_token_kl(policy, ref, m, "k1"), torch.zeros_like(policy))  # LoRA B = 0: policy = ref
    scores = _full_logits(bundle, ro).float() / cfg.sampling.temperature  # the reference's logits
    cut = removed_tokens(scores.flatten(0, 1), cfg.sampling.top_k, cfg.sampling.top_p).view(scores.shape)
    outside = cut.gather(-1, ids[..., None]).squeeze(-1) & m
    assert outside.sum() >= 4  # the case that would be an infinite KL without the kept token
    kept = scores.masked_fill(cut, float("-inf")).scatter(-1, ids[..., None], scores.gather(-1, ids[..., None]))
    expected = scores.gather(-1, ids[..., None]).squeeze(-1) - torch.logsumexp(kept, -1)
    assert torch.isfinite(ref[m]).all() and torch.allclose(ref[m], expected[m], atol=1e-5)
    torch.nn.init.normal_(next(p for n, p in bundle.policy.named_parameters() if "lora_B" in n), std=0.5)
    with torch.no_grad():
        moved, _ = bundle.model(*args, cfg.sampling)
    kl = per_token_kl(moved, ref, m, "k1")
    assert torch.isfinite(kl).all() and kl[m].abs().max() > 1e-3  # the policy moved: a finite, non-zero penalty


@pytest.mark.parametrize("backend", ["exact", "hf"])
def test_under_top_k_and_top_p_the_first_minibatch_is_on_policy(tiny_model_dir, tmp_path, backend):
    from t2g_core.ppo import CriticSource, train

    prompts = pd.DataFrame(
        {"id": [f"p{i}" for i in range(4)], "task": "summarization", "prompt": [f"Post {i}: Cai." for i in range(4)]}
    )
    cfg = PPOConfig(
        steps=2, batch_size=4, minibatches=1, ppo_epochs=2, sampling={**TRUNCATED, "max_new_tokens": 8},
        value_model="head", generation_backend=backend, learning_rate=1e-2,
    )  # fmt: skip
    res = train(cfg, tiny_model_dir, prompts, tmp_path / "run", reward_source=CriticSource(_EdgeWords()))
    for h in res.history:
        assert h["ppo/first_ratio"] == 1.0 and h["ppo/first_approx_kl"] == 0.0  # exactly: the same pass, twice
    assert res.history[0]["kl/mean"] == pytest.approx(0.0, abs=1e-6)  # the reference is truncated alike
