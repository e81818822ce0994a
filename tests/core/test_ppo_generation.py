"""Rollout generation backends: batched ``generate`` samples the untruncated distribution, reproducibly; vLLM is
refused clearly where it is not installed; the trainer runs with each backend available here."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import torch

from t2g_core.config.ppo import PPOConfig
from t2g_core.ppo.generation import HFBackend, make_backend, pad_after_eos, untruncated_sampling

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
    cfg = PPOConfig(temperature=0.7, max_new_tokens=5)
    gen = untruncated_sampling(cfg, tok)
    gen.output_scores = gen.output_logits = gen.return_dict_in_generate = True
    enc = tok(["Cai lives in", "A much longer post about Quito and dogs"], padding=True, return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**enc, generation_config=gen)
    for scores, logits in zip(out.scores, out.logits, strict=True):
        assert torch.isfinite(scores).all()  # nothing was cut away by top-k / top-p
        assert torch.allclose(scores, logits / 0.7, atol=1e-5)  # tau applied once, the model's 0.2 ignored


def test_the_hf_backend_is_reproducible_per_stream_and_pads_after_eos(truncating_model):
    model, tok = truncating_model
    backend = HFBackend(PPOConfig(temperature=1.0, max_new_tokens=12), tok)
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
        max_new_tokens=8,
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
