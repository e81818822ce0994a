"""Which folders the pipeline's evaluation compares, and the PPO histories it plots (the Prefect task: tests/tasks)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from t2g_core.evaluation.policies import held_out_ids, histories, policy_refs


def test_policy_refs_single_and_arms(tmp_path):
    for name in ("warm", "base", "span", "scalar/adapter"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "adapter_config.json").write_text("{}")
    models = {"base": str(tmp_path / "base"), "policy": str(tmp_path / "warm")}
    assert policy_refs(models, {"adapter_dir": str(tmp_path / "span")}) == {
        "warm_start": tmp_path / "warm",
        "ppo": tmp_path / "span",
    }
    arms = {"arms": {"span": {"adapter_dir": str(tmp_path / "span")}, "scalar": {"path": str(tmp_path / "scalar")}}}
    refs = policy_refs(models, arms, include_base=True)
    assert list(refs) == ["warm_start", "base", "span", "scalar"]
    assert refs["scalar"] == tmp_path / "scalar" / "adapter"  # a PPO run folder: its adapter subfolder
    with pytest.raises(ValueError, match="PPO reference: no model or adapter folder"):
        policy_refs(models, {"adapter_dir": str(tmp_path / "missing"), "path": str(tmp_path)})
    with pytest.raises(ValueError, match="no 'policy'"):
        policy_refs({"base": "x"}, {})


def test_histories_from_list_file_or_run_dir(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "history.json").write_text(json.dumps([{"step": 1, "reward": 0.2}, {"step": 2, "reward": 0.4}]))
    pd.DataFrame({"step": [0, 1], "kl": [0.0, 0.1]}).to_csv(tmp_path / "h.csv", index=False)
    found = histories(
        {
            "arms": {
                "a": {"history": [{"reward": 1.0}, {"reward": 2.0}]},
                "b": {"run_dir": str(tmp_path / "run")},
                "c": {"history_path": str(tmp_path / "h.csv")},
                "d": {"adapter_dir": "x"},
            }
        }
    )
    assert sorted(found) == ["a", "b", "c"]
    assert found["a"]["step"].tolist() == [0, 1] and found["b"]["reward"].tolist() == [0.2, 0.4]
    assert found["c"]["kl"].tolist() == [0.0, 0.1]


def test_held_out_ids_come_from_the_ppo_run_folder(tmp_path):
    (tmp_path / "run").mkdir()
    pd.DataFrame({"id": ["b", "a"], "prompt": ["x", "y"]}).to_parquet(tmp_path / "run" / "eval.parquet")
    assert held_out_ids({"adapter_dir": "x", "run_dir": str(tmp_path / "run")}) == ["b", "a"]
    assert held_out_ids(
        {"arms": {"span": {"run_dir": str(tmp_path / "none")}, "scalar": {"run_dir": str(tmp_path / "run")}}}
    ) == ["b", "a"]
    assert held_out_ids({"adapter_dir": "x"}) is None
