"""Warm start and the cached demo-model build, on a very small config so they run in seconds."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from t2g_core.config.models import ModelsConfig
from t2g_core.demo import make_demo_feedback
from t2g_core.demo.summarization import warm_start_pairs
from t2g_core.models.demo_build import ensure_demo_models
from t2g_core.models.tiny import TinySpec, build_tiny_model, train_tokenizer, warm_start
from t2g_core.policy_prompts import policy_messages, render_policy_prompt

SMALL = TinySpec(
    vocab_size=400,
    hidden_size=32,
    intermediate_size=64,
    num_heads=2,
    warm_start_steps=4,
    warm_start_batch_size=8,
    policy_sft_steps=4,
    policy_noise_steps=2,
    policy_sft_batch_size=8,
    policy_sft_examples=64,
    warm_start_block_size=64,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """2 shared cores: tiny models run fastest (and disturb others least) on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def feedback():
    return make_demo_feedback("summarization", 24, seed=0)


def test_policy_prompt_renders_through_the_chat_template(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = render_policy_prompt(tok, "summarization", "I am Cai.")
    assert text.startswith(tok.bos_token + "<|user|>\n") and text.endswith("<|assistant|>\n")
    assert policy_messages("summarization", "I am Cai.")[0]["content"] in text
    with pytest.raises(ValueError, match="unknown task"):
        policy_messages("poetry", "x")


def test_supervised_warm_start_lowers_the_response_loss(tmp_path):
    pairs = warm_start_pairs(64, seed=0)
    train_tokenizer([t for p in pairs for t in p], 400, tmp_path / "tok")
    build_tiny_model(tmp_path / "m", tmp_path / "tok", SMALL)
    tok = AutoTokenizer.from_pretrained(tmp_path / "m")
    rendered = [(render_policy_prompt(tok, "summarization", p), r) for p, r in pairs]
    result = warm_start(tmp_path / "m", rendered, SMALL, steps=12, lr=1e-2, batch_size=8, progress=False)
    assert len(result.losses) == 12
    assert sum(result.losses[-3:]) / 3 < 0.8 * sum(result.losses[:3]) / 3
    # saved in place and still loadable
    AutoModelForCausalLM.from_pretrained(tmp_path / "m")


def test_lm_warm_start_runs_on_plain_texts(tmp_path):
    texts = [p for p, _ in warm_start_pairs(32, seed=1)]
    train_tokenizer(texts, 400, tmp_path / "tok")
    build_tiny_model(tmp_path / "m", tmp_path / "tok", SMALL)
    result = warm_start(tmp_path / "m", texts, SMALL, steps=10, lr=1e-2, batch_size=4, block_size=48, progress=False)
    assert sum(result.losses[-3:]) / 3 < sum(result.losses[:3]) / 3


def test_ensure_demo_models_builds_once_and_reloads(tmp_path, feedback):
    cfg = ModelsConfig()
    built = ensure_demo_models(tmp_path, cfg, feedback, progress=False, spec=SMALL)
    info = built.policy.parent / "build.json"
    stamp = info.stat().st_mtime_ns
    meta = json.loads(info.read_text())
    assert meta["task"] == "summarization" and meta["config"] == SMALL.model_dump(mode="json")
    assert "noise_losses" in meta and meta["cpu_seconds"] > 0
    again = ensure_demo_models(tmp_path, cfg, feedback, progress=False, spec=SMALL)
    assert again == built and info.stat().st_mtime_ns == stamp  # reused, not rebuilt
    rebuilt = ensure_demo_models(tmp_path, cfg, feedback, progress=False, rebuild=True, spec=SMALL)  # --refresh models
    assert rebuilt == built and info.stat().st_mtime_ns > stamp
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp or swapped-out folder left behind
    for folder in (built.base, built.policy):
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder)
        batch = tok([render_policy_prompt(tok, "summarization", feedback["prompt"][0])], return_tensors="pt")
        out = model.generate(**batch, max_new_tokens=4, do_sample=False)
        assert out.shape[1] == batch["input_ids"].shape[1] + 4 or out[0, -1] == tok.eos_token_id
    other = ensure_demo_models(tmp_path, cfg, feedback, progress=False, spec=SMALL.model_copy(update={"seed": 1}))
    assert other.policy != built.policy
    assert not torch.equal(
        AutoModelForCausalLM.from_pretrained(built.policy).lm_head.weight,
        AutoModelForCausalLM.from_pretrained(built.base).lm_head.weight,
    )


def test_external_models_are_passed_through(tmp_path, feedback):
    cfg = ModelsConfig(policy="some/policy", reward_model_base="some/rm")
    built = ensure_demo_models(tmp_path, cfg, feedback, progress=False)
    assert (str(built.policy), str(built.base)) == ("some/policy", "some/rm")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("task", ["qa", "code"])
def test_feedback_without_meta_builds_the_models(tmp_path, task):
    """Ingested feedback has no ``meta``; stored as Parquet, the all-null column comes back as NaN, which the demo
    corpus took for a meta object (before: ``TypeError: 'float' object is not iterable`` in build-models)."""
    from t2g_core.feedback import load_feedback
    from t2g_core.store import read_artifact, write_parquet

    rows = make_demo_feedback(task, 8, seed=0).drop(columns=["meta"]).to_dict(orient="records")
    (tmp_path / "fb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_parquet(load_feedback(tmp_path / "fb.jsonl"), tmp_path / "fb.parquet", "feedback")
    stored = read_artifact(tmp_path / "fb.parquet", "feedback")
    built = ensure_demo_models(tmp_path / "models", ModelsConfig(), stored, progress=False, spec=SMALL)
    assert json.loads((built.policy.parent / "build.json").read_text())["task"] == task


class _Stop(Exception):
    """Stands for a time limit or a kill in the middle of a build."""


def _stopping_at(desc: str, step: int):
    def progress(phase, done, total, metrics=None):
        if phase == desc and done == step:
            raise _Stop(f"{phase} stopped at step {done}")

    return progress


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_an_interrupted_build_resumes_from_its_checkpoints_with_the_uninterrupted_weights(tmp_path, feedback):
    """A build stopped in the LM warm start, then again in the policy's supervised phase, resumes each time from its
    last checkpoint (not from step 1) and ends with exactly the weights of a build that was never stopped."""
    cfg, spec = (
        ModelsConfig(),
        SMALL.model_copy(update={"warm_start_steps": 8, "policy_sft_steps": 8, "checkpoint_every": 2}),
    )
    whole = ensure_demo_models(tmp_path / "whole", cfg, feedback, progress=False, spec=spec)
    messages: list[str] = []
    for desc, step in (("LM warm start", 5), ("policy SFT", 7)):
        with pytest.raises(_Stop):
            ensure_demo_models(
                tmp_path / "stopped", cfg, feedback, progress=_stopping_at(desc, step), log=messages.append, spec=spec
            )
    partial = next((tmp_path / "stopped").glob(".tiny-*.partial"))
    assert (partial / "base").is_dir() and (partial / "checkpoints" / "policy-clean" / "step-000006").is_dir()
    resumed = ensure_demo_models(tmp_path / "stopped", cfg, feedback, progress=False, log=messages.append, spec=spec)
    assert any("resumes from" in m for m in messages)
    assert any("policy SFT (clean): 8 steps" in m and "resumed at step 6" in m for m in messages), messages
    info = json.loads((resumed.policy.parent / "build.json").read_text())
    assert info["resumed_at_step"] == {"lm_warm_start": 4, "policy_sft": 6, "policy_noise": 0}
    for got, want in ((resumed.base, whole.base), (resumed.policy, whole.policy)):
        a, b = _weights(got), _weights(want)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), got.name
    assert not [p for p in (tmp_path / "stopped").iterdir() if p.name.startswith(".")]


def test_a_tampered_warm_start_checkpoint_is_refused_and_never_runs(tmp_path):
    """The build's warm-start checkpoints (``state.pt``) hold tensors and plain data and load with
    ``weights_only=True``: a pickle payload planted in one is refused, naming the file, and its code does not run."""
    from t2g_core.training import UnsafeCheckpoint
    from tests.core._pickles import plant

    texts = [p for p, _ in warm_start_pairs(16, seed=1)]
    train_tokenizer(texts, 400, tmp_path / "tok")
    build_tiny_model(tmp_path / "m", tmp_path / "tok", SMALL)
    ckpt, marker = tmp_path / "ckpt", tmp_path / "marker"
    small = SMALL.model_copy(update={"checkpoint_every": 2})
    warm_start(tmp_path / "m", texts, small, steps=4, batch_size=4, block_size=48, progress=False, checkpoint_dir=ckpt)
    saved = sorted(ckpt.glob("step-*/state.pt"))
    assert saved, "the warm start left no checkpoint to resume from"
    plant(saved[-1], marker)
    with pytest.raises(UnsafeCheckpoint, match="state.pt: refused"):
        warm_start(
            tmp_path / "m", texts, small, steps=6, batch_size=4, block_size=48, progress=False, checkpoint_dir=ckpt
        )
    assert not marker.exists()
