"""One dtype knob: ``models.dtype`` is resolved once per stage into a ``torch.dtype`` that every model of every stage
loads in (policy, reference, critic, both reward-model kinds, evaluation); a name never travels below the stage; the
reward model's mixed precision follows it; vLLM refuses a dtype it cannot honour instead of changing it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from t2g_core.config import ModelsConfig, PPOConfig, RewardModelConfig, load_config
from t2g_core.models.loading import load_causal_lm, resolve_dtype, weights_dtype
from t2g_core.ppo.generation import make_backend, vllm_dtype
from t2g_core.sft import bf16_autocast
from tests.core._load_spy import _Loads


# ------------------------------------------------------------------------------------------ names and torch dtypes
def test_a_name_becomes_a_torch_dtype_once_and_only_a_torch_dtype_travels_below_the_stage(tiny_model_dir):
    assert resolve_dtype("auto", "cpu") is torch.float32 and resolve_dtype("float16", "cpu") is torch.float16
    assert weights_dtype(torch.bfloat16) is torch.bfloat16 and weights_dtype(None, "cpu") is torch.float32
    for name in ("auto", "bfloat16"):
        with pytest.raises(TypeError, match="expected a torch.dtype"):
            weights_dtype(name)
        with pytest.raises(TypeError, match="expected a torch.dtype"):  # "auto" would mean the checkpoint's dtype
            load_causal_lm(tiny_model_dir, dtype=name, device="cpu")


# ------------------------------------------------------------------------------------------ generation backends
def test_vllm_maps_half_dtypes_by_name_and_refuses_float32_naming_the_setting():
    assert vllm_dtype(torch.bfloat16) == "bfloat16" and vllm_dtype(torch.float16) == "float16"
    with pytest.raises(ValueError, match=r"generation_backend=vllm.*models\.dtype=float32.*generation_backend=hf"):
        vllm_dtype(torch.float32)


def test_the_vllm_backend_refuses_float32_before_importing_vllm(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # importing vllm would fail: the dtype check must come first
    cfg = PPOConfig(generation_backend="vllm")
    with pytest.raises(ValueError, match=r"models\.dtype=float32"):
        make_backend(cfg, None, model_ref="base", dtype=torch.float32, workdir=tmp_path)
    with pytest.raises(TypeError, match="torch.dtype"):
        make_backend(cfg, None, model_ref="base", dtype="auto", workdir=tmp_path)


# ------------------------------------------------------------------------------------------ reward-model precision
def test_reward_model_autocast_follows_the_weights_dtype(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert bf16_autocast(torch.bfloat16, "cuda")
    assert not bf16_autocast(torch.float32, "cuda") and not bf16_autocast(torch.float16, "cuda")
    assert not bf16_autocast(torch.bfloat16, "cpu")  # on the CPU the bf16 base runs as loaded, no autocast
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert not bf16_autocast(torch.bfloat16, "cuda")


def test_reward_model_precision_is_refused_with_the_models_dtype_to_write(tmp_path):
    assert "precision" not in RewardModelConfig.model_fields
    with pytest.raises(ValidationError, match=r"reward_model\.precision.*models\.dtype: bfloat16 for bf16"):
        RewardModelConfig(precision="bf16")
    recipe = tmp_path / "old.yaml"
    recipe.write_text("reward_model:\n  precision: fp32\n", encoding="utf-8")
    with pytest.raises(ValidationError, match=r"not a setting.*float32 for fp32"):
        load_config(recipe)
    with pytest.raises(ValidationError, match="models.dtype"):
        load_config(None, ["reward_model.precision=bf16"])


def test_a_ppo_run_folder_that_recorded_precision_still_loads():
    from t2g_core.ppo.run import load_settings

    recorded = {"ppo": {}, "reward_model": {"precision": "bf16", "kind": "tagger"}, "models": {"dtype": "bfloat16"}}
    settings = load_settings(recorded)
    assert settings.reward_model.kind == "tagger" and settings.models.dtype == "bfloat16"


def _demo_feedback_and_annotations(n: int):
    from t2g_core.annotators import annotate
    from t2g_core.config import AnnotateConfig
    from t2g_core.demo import make_demo_feedback

    fb = make_demo_feedback("summarization", n, seed=5)
    return fb, annotate(fb, AnnotateConfig(annotator="reference"), progress=False).frame


@pytest.mark.slow  # trains the reward model
def test_bfloat16_trains_the_generative_reward_model_on_the_cpu_without_autocast(tiny_model_dir, tmp_path):
    from t2g_core.models.loading import load_tokenizer
    from t2g_core.reward_model.data import build_rm_data
    from t2g_core.reward_model.train import make_trainer

    cfg = RewardModelConfig(kind="generative", max_steps=1, batch_size=2, save_steps=10, val_fraction=0.0)
    df, _ = build_rm_data(*_demo_feedback_and_annotations(4), load_tokenizer(tiny_model_dir, padding_side=None), cfg)
    trainer = make_trainer(cfg, tiny_model_dir, df, tmp_path, progress=False, dtype=torch.bfloat16)
    assert not trainer.args.bf16
    frozen = {p.dtype for p in trainer.model.parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16}
    trainer.train()
    assert trainer.state.global_step == 1 and all(torch.isfinite(p).all() for p in trainer.model.parameters())


# ------------------------------------------------------------------------------------------ every stage's models


@pytest.mark.slow
def test_models_dtype_reaches_every_model_of_every_stage_as_one_torch_dtype(tiny_model_dir, tmp_path, monkeypatch):
    from t2g_core.config import EvaluateConfig
    from t2g_core.config.ppo import RewardModelGate
    from t2g_core.config.stages import EvaluateSettings, PPOSettings, RewardModelSettings
    from t2g_core.stages import evaluate, ppo, reward_model
    from t2g_core.stages.context import StageContext
    from t2g_core.stages.refs import ModelsRef, PolicySet
    from t2g_core.workspace import Workspace

    torch.set_num_threads(1)
    loads = _Loads().install(monkeypatch)
    models_cfg = ModelsConfig(dtype="bfloat16")
    store = Workspace.at(tmp_path).store
    fb, ann = _demo_feedback_and_annotations(12)
    fb_ref = store.write("feedback", "fb", fb, "feedback")
    ann_ref = store.write("annotations", "ann", ann, "annotations")
    models = ModelsRef.of(tiny_model_dir, tiny_model_dir)
    small = {"max_steps": 1, "batch_size": 4, "val_fraction": 0.3, "max_new_tokens": 8, "eval_max_items": 2}

    tagger_dir = None
    for kind in ("generative", "tagger"):  # reward model: training, then held-out evaluation (loads it again)
        settings = RewardModelSettings(reward_model=RewardModelConfig(kind=kind, **small), models=models_cfg)
        ref = reward_model.train(fb_ref, ann_ref, None, None, models, settings, StageContext.keyed(tmp_path, kind))
        tagger_dir = ref.model_dir if kind == "tagger" else tagger_dir
    rm_meta = json.loads(next(tmp_path.glob("checkpoints/reward_model/*/adapter/rm_train.json")).read_text())
    assert rm_meta["dtype"] == "bfloat16"

    ppo_cfg = PPOConfig(
        reward_source="reward_model",
        reward_model_path=tagger_dir,
        reward_model_gate=RewardModelGate(allow_weak=True),  # a 1-step tagger: the dtype path is tested, not quality
        value_model="separate",  # the critic's own backbone
        steps=1,
        batch_size=4,
        minibatches=2,
        ppo_epochs=1,
        sampling={"max_new_tokens": 8},
    )
    settings = PPOSettings(ppo=ppo_cfg, models=models_cfg)
    policy = ppo.train(fb_ref, models, None, settings, StageContext.keyed(tmp_path, "ppo"))
    assert json.loads((Path(policy.run_dir) / "models.json").read_text())["policy"]["dtype"] == "bfloat16"

    chosen = PolicySet(models={"warm_start": str(tiny_model_dir), "ppo": policy.adapter_dir}, baseline="warm_start")
    eval_settings = EvaluateSettings(
        evaluate=EvaluateConfig(max_prompts=2, sampling={"max_new_tokens": 8}), models=models_cfg
    )
    evaluate.evaluate(fb_ref, chosen, eval_settings, StageContext.keyed(tmp_path, "eval"), device="cpu")

    assert loads.callers() == {
        "t2g_core.sft.sft_trainer",  # generative reward model, training
        "t2g_core.reward_model.scoring.load_reward_model",  # generative reward model, evaluation
        "t2g_core.reward_model.tagger.build_tagger",  # tagger, training
        "t2g_core.reward_model.tagger.load_tagger",  # tagger, evaluation and PPO's reward source
        "t2g_core.ppo.models.load_policy",  # policy (its reference is the base without the adapter) and critic
        "t2g_core.evaluation.generate.load_policy",  # evaluation, both policies
    }
    assert sum(caller == "t2g_core.ppo.models.load_policy" for caller, _, _ in loads.calls) == 2
    assert all(dtype is torch.bfloat16 for _, dtype, _ in loads.calls), loads.calls
    assert all(loaded == {torch.bfloat16} for _, _, loaded in loads.calls), loads.calls
