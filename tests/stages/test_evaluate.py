"""The evaluation stage: which policies the pipeline compares on which prompts, results and report under the stage
key (reused unless forced), the tracked metrics, and the promotion verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from t2g_core.config import EvaluateConfig, HoldoutConfig
from t2g_core.config.stages import EvaluateSettings
from t2g_core.stages import evaluate
from t2g_core.stages.context import StageContext
from t2g_core.stages.refs import ModelsRef, PolicyRef, PolicySet
from t2g_core.tracking import MemoryTracker

MODELS = ModelsRef(base="/base", policy="/warm", base_digest="b", policy_digest="p")


def _policy(run_dir: Path, held_out: list[str] | None = None) -> PolicyRef:
    run_dir.mkdir(parents=True, exist_ok=True)
    if held_out is not None:
        pd.DataFrame({"id": held_out}).to_parquet(run_dir / "eval.parquet")
    return PolicyRef(
        adapter_dir="/adapter", run_dir=str(run_dir), digest="d", steps=2, history_path=str(run_dir / "h.json")
    )


def test_the_pipeline_compares_the_warm_start_with_ppo_on_the_held_out_prompts(demo_feedback, tmp_path):
    fb = demo_feedback(8)
    recorded = evaluate.pipeline_policies(fb, MODELS, _policy(tmp_path / "a", ["sum-00001"]), EvaluateSettings())
    assert recorded.models == {"warm_start": "/warm", "ppo": "/adapter"} and recorded.baseline == "warm_start"
    assert recorded.held_out == ["sum-00001"]
    half = EvaluateSettings(
        evaluate=EvaluateConfig(include_base_model=True), holdout=HoldoutConfig(eval_fraction=0.5, seed=0)
    )
    redone = evaluate.pipeline_policies(fb, MODELS, _policy(tmp_path / "b"), half)
    assert list(redone.models) == ["warm_start", "base", "ppo"] and len(redone.held_out) == 4
    none = EvaluateSettings(holdout=HoldoutConfig(eval_fraction=0.0))
    assert evaluate.pipeline_policies(fb, MODELS, _policy(tmp_path / "c"), none).held_out is None


@pytest.mark.slow
def test_evaluate_writes_results_and_report_then_reuses_them(tiny_model_dir, demo_feedback, tmp_path, key_of):
    fb = demo_feedback(6)
    chosen = PolicySet(models={"a": str(tiny_model_dir), "b": str(tiny_model_dir)}, held_out=["sum-00000", "sum-00002"])
    settings = EvaluateSettings(
        evaluate=EvaluateConfig(sampling={"temperature": 0, "max_new_tokens": 4}, bootstrap_samples=100)
    )
    key = key_of("evaluate", data=fb, policies=chosen, settings=settings)
    ctx = StageContext.keyed(tmp_path / "ws", key, tracker=MemoryTracker())
    ref = evaluate.evaluate(fb, chosen, settings, ctx, device="cpu")
    assert Path(ref.path) == ctx.workspace.root / "reports" / "evaluate" / key
    assert ref.n_rows == 4 and ref.task == "summarization" and Path(ref.report).is_file()
    summary = json.loads(Path(ref.summary).read_text())
    assert list(summary["policies"]) == ["a", "b"] and summary["policies"]["a"]["n_items"] == 2
    assert ctx.tracker.inputs == [("feedback", "eval")] and ctx.tracker.artifacts == [Path(ref.path)]
    assert any(name.startswith("b_vs_a/") for _, m in ctx.tracker.metrics for name in m)
    stamp = Path(ref.summary).stat().st_mtime_ns
    assert evaluate.evaluate(fb, chosen, settings, ctx, device="cpu") == ref
    assert Path(ref.summary).stat().st_mtime_ns == stamp  # reused, not generated again
    forced = StageContext.keyed(tmp_path / "ws", key, force=True)
    assert evaluate.evaluate(fb, chosen, settings, forced, device="cpu").n_rows == 4
    assert Path(ref.summary).stat().st_mtime_ns != stamp


def test_no_held_out_item_in_the_data_is_a_clear_error(demo_feedback, stage_ctx):
    chosen = PolicySet(models={"a": "/a"}, held_out=["not-there"])
    with pytest.raises(ValueError, match="no items to evaluate"):
        evaluate.evaluate(demo_feedback(3), chosen, EvaluateSettings(), stage_ctx("evaluate"), device="cpu")


def test_the_key_follows_the_evaluate_settings_and_the_policies(demo_feedback, key_of, tiny_model_dir):
    fb = demo_feedback(6)
    chosen = PolicySet(models={"a": str(tiny_model_dir)})

    def key(settings, policies=chosen):
        return key_of("evaluate", data=fb, policies=policies, settings=settings)

    assert key(EvaluateSettings()) == key(EvaluateSettings(evaluate=EvaluateConfig()))
    assert key(EvaluateSettings()) != key(EvaluateSettings(evaluate=EvaluateConfig(sampling={"max_new_tokens": 5})))
    assert key(EvaluateSettings()) != key(EvaluateSettings(), PolicySet(models={"a": str(tiny_model_dir)}, held_out=[]))


def test_flat_metrics_and_promotion_read_the_summary():
    summary = {
        "task": "summarization",
        "policies": {"base": {"metrics": {"fact_error": 0.5}}, "ppo": {"metrics": {"fact_error": 0.25, "pass@1": 1}}},
        "comparisons": [{"policy": "ppo", "baseline": "base", "metric": "fact_error", "diff": -0.25, "low": -0.4,
                         "high": -0.1, "verdict": "better"}],
    }  # fmt: skip
    flat = evaluate.flat_metrics(summary)
    assert flat["ppo/pass_1"] == 1 and flat["ppo_vs_base/fact_error_low"] == -0.4
    assert evaluate.promotion(summary, "ppo") == ("fact_error", -0.25)  # lower error: the higher score
    summary["comparisons"][0]["verdict"] = "not significant"
    assert evaluate.promotion(summary, "ppo") is None
