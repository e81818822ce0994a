"""Generation for evaluation on a real tiny Llama (full folder and PEFT adapter folder), left-padded and seeded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from t2g_core.config.evaluate import EvaluateConfig  # noqa: E402
from t2g_core.evaluation.generate import generate, generate_samples, generation_settings, load_policy  # noqa: E402
from t2g_core.policy_prompts import render_policy_prompt as render_prompt  # noqa: E402

CHAT = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def _build_tiny(out: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = "the cat sat on a mat in paris with two dogs and eats tacos berlin user assistant".split()
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["<unk>", "<pad>", "<s>", "<|end|>", "<|user|>", "<|assistant|>"]
    tok.train_from_iterator([" ".join(words)] * 3, trainers.WordLevelTrainer(special_tokens=specials))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="<|end|>"
    )
    fast.chat_template = CHAT
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=fast.pad_token_id,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    LlamaForCausalLM(cfg).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def policy_dir(request, tmp_path_factory) -> Path:
    """The shared ``tiny_model_dir`` (else a tiny Llama built here) with larger random weights, so that greedy
    decoding emits varied text instead of one repeated token (which would make comparisons vacuous)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        src = Path(request.getfixturevalue("tiny_model_dir"))
    except pytest.FixtureLookupError:
        src = _build_tiny(tmp_path_factory.mktemp("tiny-policy"))
    model, tok = AutoModelForCausalLM.from_pretrained(src), AutoTokenizer.from_pretrained(src)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    out = tmp_path_factory.mktemp("varied-policy")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


PROMPTS = ["the cat sat on a mat", "two dogs", "the cat sat on a mat in paris with two dogs and eats tacos", "berlin"]


def test_batched_left_padded_generation_matches_one_by_one(policy_dir):
    torch.set_num_threads(1)
    cfg = EvaluateConfig(batch_size=4, sampling={"temperature": 0, "max_new_tokens": 6})
    batched = generate(policy_dir, "summarization", PROMPTS, cfg)
    single = generate(policy_dir, "summarization", PROMPTS, cfg.model_copy(update={"batch_size": 1}))
    assert len(batched) == len(PROMPTS)
    assert batched == single  # left padding must not change greedy outputs
    assert len(set(batched)) == len(PROMPTS) and all(batched)  # varied text, so the equality above means something


def test_sampling_is_seeded_and_recorded(policy_dir):
    cfg = EvaluateConfig(batch_size=2, sampling={"temperature": 1.5, "max_new_tokens": 8}, num_samples=3, seed=7)
    a = generate_samples(policy_dir, "qa", PROMPTS[:2], cfg)
    b = generate_samples(policy_dir, "qa", PROMPTS[:2], cfg)
    c = generate_samples(policy_dir, "qa", PROMPTS[:2], cfg.model_copy(update={"seed": 8}))
    assert [len(s) for s in a] == [3, 3]
    assert a == b and a != c
    assert generation_settings(cfg) | {} == {
        "decoding": "sampled",
        "max_new_tokens": 8,
        "num_samples": 3,
        "batch_size": 2,
        "seed": 7,
        "temperature": 1.5,
        "top_p": 1.0,
        "top_k": 0,
    }
    with pytest.raises(ValueError, match=r"needs sampling \(sampling\.temperature > 0\)"):  # refused by the config
        EvaluateConfig(num_samples=2, pass_k=(1,), sampling={"temperature": 0})


def test_top_k_and_top_p_reach_generate(policy_dir):
    """top_k = 1 (or a top_p below the top token's probability) leaves one token: sampling is then greedy decoding;
    a wide top_k is still sampling."""
    torch.set_num_threads(1)
    greedy = generate(
        policy_dir, "qa", PROMPTS, EvaluateConfig(batch_size=4, sampling={"temperature": 0, "max_new_tokens": 6})
    )
    sampled = EvaluateConfig(batch_size=4, sampling={"temperature": 1.5, "max_new_tokens": 6}, seed=3)

    def truncated(**cut) -> EvaluateConfig:
        return sampled.model_copy(update={"sampling": sampled.sampling.model_copy(update=cut)})

    assert generate(policy_dir, "qa", PROMPTS, truncated(top_k=1)) == greedy
    assert generate(policy_dir, "qa", PROMPTS, truncated(top_p=1e-6)) == greedy
    assert generate(policy_dir, "qa", PROMPTS, truncated(top_k=50)) != greedy


def test_prompt_is_rendered_with_the_chat_template(policy_dir):
    _, tok = load_policy(policy_dir)
    text = render_prompt(tok, "summarization", "two dogs")
    assert "two dogs" in text and text != "two dogs"
    try:
        from t2g_core.policy_prompts import render_policy_prompt
    except ImportError:
        expected = tok.apply_chat_template(
            [{"role": "user", "content": "two dogs"}], tokenize=False, add_generation_prompt=True
        )
    else:
        expected = render_policy_prompt(tok, "summarization", "two dogs")
    assert text == expected


def test_adapter_folder_loads_on_its_base_and_changes_outputs(policy_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(policy_dir)
    peft_model = get_peft_model(
        base,
        LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False, task_type="CAUSAL_LM"
        ),
    )
    adapter = tmp_path / "adapter"
    peft_model.save_pretrained(adapter)
    cfg_path = adapter / "adapter_config.json"
    cfg_json = json.loads(cfg_path.read_text())
    assert Path(cfg_json["base_model_name_or_path"]).resolve() == Path(policy_dir).resolve()
    model, _ = load_policy(adapter)
    assert type(model).__name__ == "PeftModelForCausalLM"
    cfg = EvaluateConfig(batch_size=4, sampling={"temperature": 0, "max_new_tokens": 6})
    with_adapter = generate(adapter, "summarization", PROMPTS, cfg)
    assert len(with_adapter) == len(PROMPTS)
    # the same LoRA weights must act: logits differ from the base
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        diff = (model(ids).logits - AutoModelForCausalLM.from_pretrained(policy_dir)(ids).logits).abs().max()
    assert diff > 1e-4
    cfg_json["base_model_name_or_path"] = str(tmp_path / "missing")
    cfg_path.write_text(json.dumps(cfg_json))
    with pytest.raises(OSError):
        load_policy(adapter)


def test_a_prompt_that_does_not_fit_is_a_clear_error(policy_dir):
    model, tok = load_policy(policy_dir)
    limit = model.config.max_position_embeddings
    from t2g_core.evaluation.generate import generate_with

    short = len(tok(render_prompt(tok, "qa", "two"), add_special_tokens=False)["input_ids"])
    # the short prompt fits exactly, the longer one does not
    cfg = EvaluateConfig(sampling={"temperature": 0, "max_new_tokens": limit - short})
    with pytest.raises(ValueError, match=r"prompt 1: \d+ tokens \+ max_new_tokens"):
        generate_with(model, tok, "qa", ["two", "two dogs and the cat"], cfg)
