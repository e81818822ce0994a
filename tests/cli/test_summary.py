"""The pipeline summary's stage lines: the reward model's headline held-out metrics are printed under its line, and
the reward PPO learnt from under the policy's."""

from __future__ import annotations

from t2g_cli.summary import _stage_line
from t2g_core.stages.refs import ArtifactRef, PolicyRef, RewardModelRef

DATA = ArtifactRef(path="/a", sha256="0" * 64, n_rows=3, schema="rm_data", key="k")


def test_reward_model_line_shows_its_headline_metrics():
    ref = RewardModelRef(
        model_dir="/rm",
        base="/b",
        rm_data=DATA,
        digest="d",
        version="3",
        metrics={"json_valid_rate": 1.0, "span_f1": 0.1786, "rouge_l": 0.5, "truth_recall_invented": 0.95},
    )
    first, second = _stage_line("reward_model", ref).splitlines()
    assert first.split() == ["reward_model", "kind=generative,", "model_dir=/rm,", "version=3,", "global_step=0"]
    assert second.split() == ["held-out:", "truth_recall_invented=0.950,", "span_f1=0.179,", "json_valid_rate=1.000"]


def test_policy_line_shows_the_reward_it_learnt_from():
    reward = {"source": "reward_model", "kind": "tagger", "score_share": 0.0412, "rollout_unmatched_rate": 0.0}
    ref = PolicyRef(adapter_dir="/p", run_dir="/r", digest="d", steps=4, history_path="/h", reward=reward)
    assert _stage_line("ppo", ref).splitlines()[1].split("reward: ")[1] == (
        "reward_model (tagger), scoring 4.1% of the PPO step, unmatched quotes on rollouts 0.0%"
    )


def test_other_stage_lines_are_one_line():
    ref = PolicyRef(adapter_dir="/p", run_dir="/r", digest="d", steps=40, history_path="/r/history.json")
    assert _stage_line("ppo", ref).splitlines() == ["  ppo            adapter_dir=/p, steps=40"]


def test_a_dataset_line_names_the_version_as_everywhere_else(tmp_path):
    """Before: "feedback 3 rows /a", beside "feedback version 1 (3 rows)" in the model descriptions and a hash in the
    MLflow run descriptions."""
    from t2g_core import datasets
    from t2g_core.config import WorkspaceConfig

    ws = WorkspaceConfig(root=str(tmp_path))
    feedback = DATA.model_copy(update={"schema_name": "feedback"})
    datasets.record_first_versions(ws, feedback, DATA.model_copy(update={"sha256": "1" * 64}))
    assert _stage_line("feedback", feedback, ws) == f"  feedback       {datasets.dataset_name(ws, feedback)}  /a"
    assert datasets.dataset_name(ws, feedback) == "feedback version 1 (3 rows, sha256 000000000000)"


def test_the_policy_samples_line_counts_the_responses():
    from t2g_core.stages.refs import PolicySamplesRef

    samples = ArtifactRef(path="/s", sha256="1" * 64, n_rows=454, schema="feedback", key="k")
    ref = PolicySamplesRef(feedback=samples, annotations=DATA)
    assert _stage_line("policy_samples", ref) == "  policy_samples 454 responses  /s"
