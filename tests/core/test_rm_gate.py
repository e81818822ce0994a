"""PPO does not start on a reward model below the quality floors of ``ppo.reward_model_gate`` on held-out items: the
demo's tagger passes, one that never catches an invented value (the case a UI run trained on) is refused with the
metric, its value and the floor, and ``allow_weak`` is the explicit way round."""

from __future__ import annotations

import pytest

from t2g_core.config import PipelineConfig, load_config
from t2g_core.stages import ppo
from t2g_core.stages.context import StageContext
from t2g_core.stages.refs import ArtifactRef, ModelsRef, RewardModelRef
from t2g_core.stages.registry import settings_for

DEMO_TAGGER = {  # the README's demo reward model on held-out items
    "truth_poor_char_f1": 0.984,
    "truth_recall_invented": 0.858,
    "truth_recall_swapped": 0.97,
    "truth_recall_redundant": 0.99,
    "span_f1": 0.93,
}
NO_INVENTED = DEMO_TAGGER | {"truth_recall_invented": 0.0}  # marks invented names good: the tagger


def _rm(metrics: dict, tmp_path) -> RewardModelRef:
    data = ArtifactRef(path=str(tmp_path / "rm_data"), sha256="0" * 64, n_rows=1, schema="rm_data", key="k")
    return RewardModelRef(
        model_dir=str(tmp_path / "rm" / "tagger"),
        kind="tagger",
        base="b",
        rm_data=data,
        digest="d",
        metrics=metrics,
        report=str(tmp_path / "rm" / "eval" / "report.md"),
        global_step=3,
    )


def _settings(*overrides: str):
    return settings_for("ppo", load_config(None, list(overrides)))


def test_the_demo_tagger_passes_the_default_floors(tmp_path):
    logged: list[str] = []
    ppo.gate_reward_model(_settings(), _rm(DEMO_TAGGER, tmp_path), logged.append)
    assert logged == []


def test_a_tagger_that_never_catches_an_invented_value_is_refused_with_the_metric_value_and_floor(tmp_path):
    with pytest.raises(ppo.WeakRewardModel) as err:
        ppo.gate_reward_model(_settings(), _rm(NO_INVENTED, tmp_path), print)
    message = str(err.value)
    assert message.startswith("PPO does not start")
    assert "truth_recall_invented = 0.000 < ppo.reward_model_gate.min_flaw_recall 0.25" in message
    assert "truth_poor_char_f1" not in message and "report.md" in message
    assert "ppo.reward_model_gate.allow_weak=true" in message
    assert "Likely cause: it trained too briefly (3 steps) or on too few items" in message


def test_allow_weak_trains_anyway_and_says_so(tmp_path):
    logged: list[str] = []
    ppo.gate_reward_model(_settings("ppo.reward_model_gate.allow_weak=true"), _rm(NO_INVENTED, tmp_path), logged.append)
    assert len(logged) == 1 and "warning" in logged[0] and "truth_recall_invented = 0.000" in logged[0]


def test_without_ground_truth_the_floor_is_agreement_with_the_annotator(tmp_path):
    own_data = {"span_f1": 0.12, "unmatched_span_rate": 0.0}
    with pytest.raises(ppo.WeakRewardModel, match=r"span_f1 = 0.120 < ppo.reward_model_gate.min_agreement_f1 0.2"):
        ppo.gate_reward_model(_settings(), _rm(own_data, tmp_path), print)
    ppo.gate_reward_model(_settings("ppo.reward_model_gate.min_agreement_f1=0.1"), _rm(own_data, tmp_path), print)


def test_a_reward_model_named_by_path_is_checked_by_the_metrics_its_evaluation_left(tmp_path):
    import json

    (tmp_path / "rm" / "eval").mkdir(parents=True)
    (tmp_path / "rm" / "eval" / "metrics.json").write_text(json.dumps(NO_INVENTED))
    named = _settings(f"ppo.reward_model_path={tmp_path / 'rm' / 'tagger'}")
    with pytest.raises(ppo.WeakRewardModel, match="truth_recall_invented"):
        ppo.gate_reward_model(named, None, print)
    logged: list[str] = []
    ppo.gate_reward_model(_settings(f"ppo.reward_model_path={tmp_path / 'elsewhere'}"), None, logged.append)
    assert "not checked" in logged[0]


def test_the_ppo_stage_refuses_before_it_prepares_a_run(tmp_path):
    feedback = ArtifactRef(path=str(tmp_path / "fb"), sha256="1" * 64, n_rows=1, schema="feedback", key="f")
    models = ModelsRef(base="b", policy="p", base_digest="b", policy_digest="p")
    ctx = StageContext.keyed(tmp_path / "ws", "ppo-key")
    with pytest.raises(ppo.WeakRewardModel):
        ppo.train(feedback, models, _rm(NO_INVENTED, tmp_path), _settings(), ctx)
    assert not (tmp_path / "ws" / "checkpoints" / "ppo" / "ppo-key").exists()
    assert PipelineConfig().ppo.reward_model_gate.allow_weak is False


def test_the_gate_reads_the_policy_text_figures_when_the_reward_model_was_tested_on_them(tmp_path):
    """A reward model that is fine on the dataset's items but misses the policy's own errors (SmolLM2's tagger: F1
    0.94-0.99 on items, 0.0-0.47 on the policy's rollouts) no longer passes on its dataset figures."""
    on_policy = DEMO_TAGGER | {f"policy_{k}": v for k, v in NO_INVENTED.items()}
    with pytest.raises(ppo.WeakRewardModel, match=r"policy_truth_recall_invented = 0.000"):
        ppo.gate_reward_model(_settings(), _rm(on_policy, tmp_path), print)
    fine = DEMO_TAGGER | {f"policy_{k}": v for k, v in DEMO_TAGGER.items()}
    ppo.gate_reward_model(_settings(), _rm(fine, tmp_path), print)
    capped = on_policy | {"annotator_truth_poor_char_f1": 0.99, "policy_annotator_truth_poor_char_f1": 0.703}
    with pytest.raises(ppo.WeakRewardModel, match=r"the annotator's own labels reach poor-span F1 0.703 against"):
        ppo.gate_reward_model(_settings(), _rm(capped, tmp_path), print)
