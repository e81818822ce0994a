"""Reward-model adapter in the MLflow registry: log, register, alias, promote, and load by alias in a fresh process.

Uses ``t2g_mlflow`` (MLflow lives there, never in t2g_core) against a SQLite tracking store in tmp_path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from t2g_core.config import RewardModelConfig, WorkspaceConfig
from t2g_core.reward_model.prompts import build_rm_prompt
from t2g_core.reward_model.train import train_rm
from tests.core._rm_rows import rm_rows

NAME = "text2grad-reward-model"
TASK_NAME = "rm-task-test"


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """One workspace with an explicit SQLite store: ``mlflow.set_tracking_uri`` also exports $MLFLOW_TRACKING_URI,
    which ``t2g_mlflow.experiment`` would otherwise prefer to the workspace default in a later test."""
    root = tmp_path_factory.mktemp("ws")
    return WorkspaceConfig(root=str(root), mlflow_tracking_uri=f"sqlite:///{root / 'mlflow.db'}")


PROBE = ("I am Cai. I live in Quito. I work as a coach.", "Cai lives in Paris and works as a coach.")

FRESH = """
import json, sys, torch
torch.set_num_threads(1)
from t2g_core.config import WorkspaceConfig
from t2g_core.reward_model.prompts import build_rm_prompt
from t2g_core.config import RewardModelConfig
from t2g_core.reward_model.scoring import load_scorer
from t2g_mlflow.registry import resolve_model_ref
folder = resolve_model_ref(f"models:/{sys.argv[5]}@{sys.argv[2]}", WorkspaceConfig(root=sys.argv[1]))
scorer = load_scorer(folder, RewardModelConfig(), device="cpu")
text = build_rm_prompt(scorer.tokenizer, "summarization", sys.argv[3], sys.argv[4], 384)
ids = scorer.tokenizer(text, return_tensors="pt", add_special_tokens=False)
with torch.inference_mode():
    logits = scorer.model(**ids).logits[0, -1]
print(json.dumps(logits.tolist()))
"""


def _logits(model_dir) -> torch.Tensor:
    from t2g_core.reward_model.scoring import load_reward_model

    model, tok = load_reward_model(model_dir, device="cpu")
    ids = tok(build_rm_prompt(tok, "summarization", *PROBE, 384), return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        return model(**ids).logits[0, -1]


@pytest.mark.slow
def test_register_promote_and_load_by_alias_from_a_fresh_process(tiny_model_dir, tmp_path, ws):
    from mlflow import MlflowClient

    from t2g_mlflow import registry, runs

    torch.set_num_threads(1)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    adapters = []
    for seed in (0, 1):  # two different adapters
        cfg = RewardModelConfig(
            kind="generative",
            val_fraction=0.0,
            max_steps=2,
            save_steps=100,
            batch_size=2,
            learning_rate=5e-2,
            lora={"dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
            seed=seed,
            warmup_ratio=0.0,
        )
        adapters.append(
            train_rm(cfg, tiny_model_dir, rm_rows(tok, cfg), tmp_path / f"run{seed}", progress=False).adapter_dir
        )

    versions, promoted = [], []
    with runs.stage_run("reward_model", {"test": True}, ws):
        for adapter, f1 in zip(adapters + [adapters[1]], (0.4, 0.3, 0.5), strict=True):
            version = registry.log_adapter_model(
                adapter, NAME, {"base_model": str(tiny_model_dir)}, {"span_f1": f1}, alias="candidate"
            )
            versions.append(version)
            promoted.append(registry.promote_if_better(NAME, version, "span_f1", f1, ws))
            if len(versions) == 2:
                client = MlflowClient()
                assert str(client.get_model_version_by_alias(NAME, "champion").version) == versions[0]
                assert str(client.get_model_version_by_alias(NAME, "candidate").version) == versions[1]
    assert promoted == [True, False, True]
    client = MlflowClient()
    assert str(client.get_model_version_by_alias(NAME, "champion").version) == versions[2]

    expected = _logits(adapters[1])
    assert not torch.equal(expected, _logits(adapters[0])), "the two adapters must differ for the test to mean anything"
    assert not torch.equal(expected, _logits(tiny_model_dir)), "the adapter must change the base"
    out = subprocess.run(
        [sys.executable, "-c", FRESH, str(Path(ws.root)), "champion", *PROBE, NAME],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr[-3000:]
    fresh = torch.tensor(json.loads(out.stdout.strip().splitlines()[-1]))
    assert torch.equal(fresh, expected.float()), f"max diff {float((fresh - expected).abs().max())}"


@pytest.mark.slow
def test_reward_model_task_builds_trains_evaluates_and_registers(tiny_model_dir, ws):
    from mlflow import MlflowClient

    from t2g_core.annotators import annotate
    from t2g_core.config import AnnotateConfig
    from t2g_core.demo import make_demo_feedback
    from t2g_core.store import artifact_key
    from t2g_core.workspace import Workspace
    from tasks.reward_model import train_reward_model

    torch.set_num_threads(1)
    store = Workspace.at(ws.root).store
    fb = make_demo_feedback("summarization", 8, seed=3)
    ann = annotate(fb, AnnotateConfig(annotator="reference"), progress=False).frame
    fb_ref = store.write("feedback", artifact_key("feedback", None, {"t": "1"}), fb, "feedback")
    ann_ref = store.write("annotations", artifact_key("annotations", None, {"t": "1"}), ann, "annotations")
    cfg = RewardModelConfig(
        kind="generative",
        val_fraction=0.5,
        max_steps=2,
        save_steps=100,
        batch_size=4,
        max_new_tokens=16,
        registered_name=TASK_NAME,
    )
    from t2g_core.config.stages import RewardModelSettings
    from t2g_core.stages.refs import ModelsRef

    models = ModelsRef.of(tiny_model_dir, tiny_model_dir)
    settings = RewardModelSettings(reward_model=cfg)

    first = train_reward_model.fn(fb_ref, ann_ref, None, None, models, settings, ws)
    assert Path(first.model_dir, "adapter_config.json").exists()
    assert first.version == "1" and first.champion is True and first.global_step == 2
    assert {"json_valid_rate", "span_f1", "rouge_l", "gen_tokens_per_s"} <= first.metrics.keys()
    assert Path(first.report).read_text().startswith("# Reward model evaluation")
    client = MlflowClient()
    run = client.get_run(client.get_model_version(TASK_NAME, "1").tags["source_run_id"])
    assert "rm_eval.span_f1" in run.data.metrics and "rm/loss" in run.data.metrics
    assert run.data.params["input.models.base"] == str(tiny_model_dir)
    # same inputs again: data and training are reused, a new candidate version is logged, champion stays (not better)
    second = train_reward_model.fn(fb_ref, ann_ref, None, None, models, settings, ws)
    assert second.model_dir == first.model_dir and second.rm_data == first.rm_data.model_copy(update={"run_id": None})
    assert second.version == "2" and second.champion is False
    assert str(client.get_model_version_by_alias(TASK_NAME, "candidate").version) == "2"
    assert str(client.get_model_version_by_alias(TASK_NAME, "champion").version) == "1"


def test_the_reward_model_ppo_ended_on_is_registered_once_with_every_rounds_audit(workspace_cfg, tmp_path):
    """The critique loop's last refreshed reward model is one version (alias ``refreshed``), logged by the PPO run,
    with a description in words and each round's audit as a metric at its PPO step. Before: one version per round
    (2-9 in a demo run), with neither description nor metrics on the version."""
    from mlflow import MlflowClient

    from t2g_core.config.stages import PPOSettings
    from t2g_core.stages.refs import PolicyRef
    from t2g_mlflow import runs
    from tasks.ppo import register_refreshed

    (tmp_path / "tagger").mkdir()
    (tmp_path / "tagger" / "config.json").write_text("{}")
    audits = [(0, 0.5), (5, 0.7), (10, 0.9)]
    rounds = [
        {
            "round": r,
            "step": s,
            "folder": str(tmp_path / "tagger"),
            "metrics": {"f1": f1, "poor_f1": f1, "annotated": 16.0},
        }
        for r, (s, f1) in enumerate(audits)
    ]
    policy = PolicyRef(
        adapter_dir="a", run_dir=str(tmp_path), digest="d", steps=12, history_path="h", reward_models=rounds
    )
    settings = PPOSettings()
    with runs.stage_run("ppo", {}, workspace_cfg) as run:
        version = register_refreshed(policy, settings, "1")
    client, name = MlflowClient(), settings.reward_model.registered_name
    assert [v.version for v in client.search_model_versions(f"name = '{name}'")] == [int(version)]
    mv = client.get_model_version(name, version)
    assert mv.run_id == run.info.run_id and str(client.get_model_version_by_alias(name, "refreshed").version) == version
    assert "refreshed 3 times by the critique loop from version 1" in mv.description
    assert "PPO's last rewards" in mv.description and "poor-span F1 0.90" in mv.description, mv.description
    model = client.get_logged_model(mv.source.removeprefix("models:/"))
    f1 = sorted((m.step, m.value) for m in model.metrics if m.key == "critique_loop/f1")
    assert f1 == audits
