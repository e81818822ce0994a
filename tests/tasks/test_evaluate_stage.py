"""The evaluation task end to end (results, tracking, reuse, PPO's held-out prompts) and a registered policy alias
resolved to its adapter folder."""

from __future__ import annotations

import json

import pandas as pd
import pytest


@pytest.mark.slow
def test_prefect_task_writes_results_logs_and_reuses_them(tiny_model_dir, tmp_path):
    pytest.importorskip("prefect")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from t2g_core.config import EvaluateConfig, HoldoutConfig, WorkspaceConfig
    from t2g_core.store import ArtifactStore, artifact_key
    from tasks.evaluate import evaluate_policy

    adapter = tmp_path / "adapter"
    lora = LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora).save_pretrained(adapter)
    rows = [
        {
            "id": f"qa-{i}",
            "task": "qa",
            "prompt": f"Where does person {i} live?",
            "response": "x",
            "critique": None,
            "reference": "In Quito.",
            "tests": None,
            "entry_point": None,
            "meta": None,
        }
        for i in range(12)
    ]
    ref = ArtifactStore(tmp_path / "ws" / "artifacts").write(
        "feedback", artifact_key("feedback"), pd.DataFrame(rows), "feedback"
    )
    from t2g_core.config.stages import EvaluateSettings
    from t2g_core.stages.refs import ModelsRef, PolicyRef

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "history.json").write_text(json.dumps([{"step": 0, "reward": 0.1}, {"step": 1, "reward": 0.3}]))
    policy = PolicyRef(
        adapter_dir=str(adapter), run_dir=str(run_dir), digest="d", steps=2, history_path=str(run_dir / "history.json")
    )
    settings = EvaluateSettings(
        evaluate=EvaluateConfig(sampling={"max_new_tokens": 4}, bootstrap_samples=200),
        holdout=HoldoutConfig(eval_fraction=0.5),
    )
    args = (
        ref,
        ModelsRef.of(tiny_model_dir, tiny_model_dir),
        policy,
        settings,
        WorkspaceConfig(root=str(tmp_path / "ws")),
    )
    out = evaluate_policy.fn(*args)
    summary = json.loads(open(out.summary).read())
    assert list(summary["policies"]) == ["warm_start", "ppo"] and out.task == "qa"
    assert summary["policies"]["ppo"]["n_items"] == 6  # no held-out file in the run: PPO's split redone at 0.5
    assert (tmp_path / "ws" / "mlflow.db").exists()
    report = open(out.report).read()
    assert "learning_curves.png" in report and "| token_f1 |" in report
    assert evaluate_policy.fn(*args).path == out.path  # same inputs: the saved results are reused
    pd.DataFrame(rows[:3]).to_parquet(run_dir / "eval.parquet")  # what PPO held out
    again = evaluate_policy.fn(args[0], args[1], policy, *args[3:])
    assert json.loads(open(again.summary).read())["policies"]["ppo"]["n_items"] == 3


@pytest.mark.slow
def test_registered_alias_resolves_to_the_adapter_folder(tiny_model_dir, tmp_path):
    pytest.importorskip("mlflow")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from t2g_core.config import WorkspaceConfig
    from t2g_core.evaluation.generate import load_policy
    from t2g_mlflow import registry, runs
    from t2g_mlflow.registry import resolve_model_ref

    adapter = tmp_path / "adapter"
    lora = LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora).save_pretrained(adapter)
    ws = WorkspaceConfig(root=str(tmp_path / "ws"))
    with runs.stage_run("ppo", {}, ws):
        version = registry.log_adapter_model(adapter, "eval-test-policy", alias="champion")
    folder = resolve_model_ref("models:/eval-test-policy@champion", ws)
    assert folder.name == f"v{version}" and (folder / "adapter_config.json").exists()
    assert resolve_model_ref(f"models:/eval-test-policy/{version}", ws) == folder
    model, _ = load_policy(folder)
    assert type(model).__name__ == "PeftModelForCausalLM"
