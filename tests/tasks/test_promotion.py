"""The policy is promoted to ``champion`` by the reward model's rule: its evaluation verdict against the policy
before PPO must be "better" on the task's primary metric, and its score must beat the champion's."""

from __future__ import annotations

import json
from types import SimpleNamespace

from t2g_core.stages.evaluate import promotion


def _summary(verdict: str, fact_error: float, task: str = "summarization") -> dict:
    return {
        "task": task,
        "policies": {"ppo": {"metrics": {"fact_error": fact_error, "rougeL": 0.9}}},
        "comparisons": [
            {"policy": "ppo", "baseline": "warm_start", "metric": "rougeL", "verdict": "better"},
            {"policy": "ppo", "baseline": "warm_start", "metric": "fact_error", "verdict": verdict},
        ],
    }


def test_the_primary_metric_decides_and_lower_error_scores_higher():
    assert promotion(_summary("better", 0.2), "ppo") == ("fact_error", -0.2)
    assert promotion(_summary("no clear difference", 0.2), "ppo") is None  # rougeL "better" does not count
    assert promotion(_summary("worse", 0.2), "ppo") is None
    code = {
        "task": "code",
        "policies": {"ppo": {"metrics": {"pass@1": 0.5}}},
        "comparisons": [{"policy": "ppo", "metric": "pass@1", "verdict": "better"}],
    }
    assert promotion(code, "ppo") == ("pass@1", 0.5)


def test_champion_moves_only_to_a_better_evaluated_policy(workspace_cfg, tmp_path):
    from mlflow import MlflowClient

    from t2g_core.stages.refs import EvaluationRef
    from t2g_mlflow import experiment, registry, runs
    from tasks.evaluate import promote_policy
    from tasks.outcome import _promotion
    from tasks.ppo import POLICY_MODEL

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    client, champions = MlflowClient(experiment.tracking_uri(workspace_cfg)), []
    for n, (verdict, error) in enumerate(
        [("better", 0.2), ("no clear difference", 0.05), ("better", 0.1), ("better", 0.3)]
    ):
        with runs.stage_run("ppo", {}, workspace_cfg):
            version = registry.log_adapter_model(adapter, POLICY_MODEL, alias="candidate")
        summary = tmp_path / f"summary{n}.json"
        summary.write_text(json.dumps(_summary(verdict, error)))
        ref = EvaluationRef(path=str(tmp_path), summary=str(summary), report="r", n_rows=1, task="summarization")
        promote_policy(ref, version, workspace_cfg, lambda _m: None)
        champions.append(str(client.get_model_version_by_alias(POLICY_MODEL, "champion").version))
    assert champions == ["1", "1", "3", "3"]
    third = client.get_model_version(POLICY_MODEL, "3")
    assert third.tags["t2g.metric.fact_error"] == "0.1"  # as measured, not negated
    assert third.tags["t2g.metric.direction"] == "lower_is_better" and third.tags["t2g.verdict"] == "better"
    second = client.get_model_version(POLICY_MODEL, "2")
    assert second.tags["t2g.metric.fact_error"] == "0.05" and second.tags["t2g.verdict"] == "no clear difference"
    assert "Not promoted (fact_error: no clear difference against the policy before PPO)" in second.description
    fourth = client.get_model_version(POLICY_MODEL, "4").description  # better than its start, not the champion
    assert "Not promoted: the champion, version 3, has fact error 10.0% against this version's 30.0%" in fourth
    assert _promotion(SimpleNamespace(version="4"))[0].endswith("not promoted (the champion is version 3)")  # outcome


def test_the_policy_names_the_reward_model_ppo_started_from_and_the_one_it_ended_on(workspace_cfg, tmp_path):
    """Before: "trained against reward model version 1" while PPO's last rewards came from the critique loop's
    refresh, version 9."""
    from mlflow import MlflowClient

    from t2g_core.stages.refs import EvaluationRef, PolicyRef
    from t2g_mlflow import registry, runs
    from tasks.evaluate import promote_policy
    from tasks.ppo import POLICY_MODEL

    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    with runs.stage_run("ppo", {}, workspace_cfg):
        version = registry.log_adapter_model(tmp_path / "adapter", POLICY_MODEL, alias="candidate")
    (tmp_path / "summary.json").write_text(json.dumps(_summary("better", 0.1)))
    ref = EvaluationRef(
        path=str(tmp_path), summary=str(tmp_path / "summary.json"), report="r", n_rows=1, task="summarization"
    )
    refreshed = [{"round": r, "step": 5 * r, "folder": "f", "metrics": {}} for r in range(8)]
    policy = PolicyRef(
        adapter_dir="a", run_dir="r", digest="d", steps=40, history_path="h", reward_models=refreshed,
        reward_model_version="1", refreshed_reward_model_version="9",
    )  # fmt: skip
    promote_policy(ref, version, workspace_cfg, lambda _m: None, policy)
    description = MlflowClient().get_model_version(POLICY_MODEL, version).description
    assert (
        "trained against reward model version 1, refreshed 8 times by the critique loop into version 9" in description
    )
    assert "PPO's last rewards" in description


def _registered(adapter, workspace_cfg) -> str:
    from t2g_mlflow import registry, runs
    from tasks.ppo import POLICY_MODEL

    with runs.stage_run("ppo", {}, workspace_cfg):
        return registry.log_adapter_model(adapter, POLICY_MODEL, alias="candidate")


def _promote(version, error, workspace_cfg, tmp_path) -> str:
    """``version`` evaluated as better than the baseline with this fact error; returns the champion after."""
    from mlflow import MlflowClient

    from t2g_core.stages.refs import EvaluationRef
    from tasks.evaluate import promote_policy
    from tasks.ppo import POLICY_MODEL

    summary = tmp_path / f"summary-{version}.json"
    summary.write_text(json.dumps(_summary("better", error)))
    ref = EvaluationRef(path=str(tmp_path), summary=str(summary), report="r", n_rows=1, task="summarization")
    promote_policy(ref, version, workspace_cfg, lambda _m: None)
    return str(MlflowClient().get_model_version_by_alias(POLICY_MODEL, "champion").version)


def test_a_forged_metric_tag_or_champion_neither_blocks_nor_hijacks_promotion(workspace_cfg, tmp_path):
    """Whoever reaches the tracking server can set a version's tags and aliases: the champion's score is the one this
    workspace's pipeline measured for a version it registered, never a tag."""
    from mlflow import MlflowClient

    from tasks.ppo import POLICY_MODEL

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    first = _registered(adapter, workspace_cfg)
    assert _promote(first, 0.2, workspace_cfg, tmp_path) == first
    client.set_model_version_tag(POLICY_MODEL, first, "t2g.metric.fact_error", "-1000000")  # "unbeatable"
    second = _registered(adapter, workspace_cfg)
    assert _promote(second, 0.3, workspace_cfg, tmp_path) == first  # worse than 0.2 as measured
    third = _registered(adapter, workspace_cfg)
    assert _promote(third, 0.1, workspace_cfg, tmp_path) == third  # the forged tag blocks nothing

    theirs = _registered(adapter, workspace_cfg)  # registered outside the pipeline, made champion, tagged unbeatable
    client.set_model_version_tag(POLICY_MODEL, theirs, "t2g.metric.fact_error", "-1000000")
    client.set_model_version_tag(POLICY_MODEL, theirs, "t2g.metric.direction", "lower_is_better")
    client.set_registered_model_alias(POLICY_MODEL, "champion", theirs)
    fourth = _registered(adapter, workspace_cfg)
    assert _promote(fourth, 0.15, workspace_cfg, tmp_path) == fourth  # a champion it did not register counts as none
