"""A stage slower than its configured time limit is stopped with a message naming the setting, and the next run
continues the model build from its checkpoint instead of starting it again (the limits are orchestration settings:
changing one re-runs nothing)."""

from __future__ import annotations

import json

import pytest
import torch

from t2g_core.config import load_config

ENDLESS_SPEC = {  # an LM warm start far longer than the limit on any machine, checkpointed at every step
    "vocab_size": 512,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "warm_start_steps": 1000000,
    "warm_start_batch_size": 4,
    "warm_start_block_size": 32,
    "checkpoint_every": 1,
}
ENDLESS_BUILD = [  # the size "smoke", patched to ENDLESS_SPEC by the test (the build looks the size up at call time)
    "data.n_items=24",
    "checks.small_tagger_data=true",
    "data.seed=3",
    "models.tiny=smoke",
]


def _checkpoint(ws):
    found = sorted(ws.glob("models/*/.tiny-*.partial/checkpoints/base/step-*[0-9]"))
    assert found, "the stopped build left no checkpoint of its LM warm start"
    return torch.load(found[-1] / "state.pt", weights_only=False)


@pytest.mark.slow
def test_a_stage_past_its_limit_names_the_setting_and_the_next_run_resumes_its_checkpoint(
    tmp_path, prefect_harness, monkeypatch
):
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: F401 - imported before a limit of seconds

    from flows import stages
    from flows.text2grad import text2grad
    from t2g_core.models.tiny import SIZES, TinySpec

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setitem(SIZES, "smoke", TinySpec(**ENDLESS_SPEC))
    ws = tmp_path / "ws"
    cfg = load_config(None, [f"workspace.root={ws}", *ENDLESS_BUILD, "timeouts.models=0.1"])
    state = text2grad(config=cfg, return_state=True)
    error = state.result(raise_on_failure=False)
    assert isinstance(error, TimeoutError), error
    notes = " ".join(getattr(error, "__notes__", []))
    assert "ran longer than timeouts.models = 0.1 minute(s)" in notes and "--set timeouts.models=null" in notes
    first = _checkpoint(ws)
    assert first["step"] >= 1 and first["resumed_at"] == []

    again = load_config(None, [f"workspace.root={ws}", *ENDLESS_BUILD, "timeouts.models=0.05"])
    feedback = stages.feedback(again)  # cached: the limit is no stage input
    assert stages.models(again, feedback, return_state=True).name == "TimedOut"
    second = _checkpoint(ws)
    assert second["resumed_at"] == [first["step"]] and second["step"] > first["step"]  # continued, not restarted
    assert second["losses"][: len(first["losses"])] == first["losses"]
    assert not list(ws.glob("models/*/tiny-*/build.json"))  # never looked finished


def test_no_stage_has_a_time_limit_unless_one_is_set(monkeypatch):
    import tasks.caching
    from flows.stages import _step
    from tasks import data, evaluate, ppo, reward_model

    monkeypatch.setattr(tasks.caching, "results_block", lambda root: "local-file-system/t2g-test")  # no API needed
    cfg = load_config(None, [])
    stages = {
        "models": data.build_models,
        "reward_model": reward_model.train_reward_model,
        "ppo": ppo.train_policy,
        "evaluate": evaluate.evaluate_policy,
    }
    for stage, task in stages.items():
        assert task.timeout_seconds is None and _step(task, cfg, stage, None).timeout_seconds is None
    limited = load_config(None, ["timeouts.ppo=90"])
    assert _step(ppo.train_policy, limited, "ppo", None).timeout_seconds == 5400
    assert json.loads(limited.model_dump_json())["timeouts"]["ppo"] == 90


def test_t2g_run_prints_the_setting_that_stopped_a_stage(tmp_path, monkeypatch):
    """What `t2g run` says when the flow ends TimedOut: the timeout, then the note naming the setting."""
    from typer.testing import CliRunner

    import flows.text2grad
    import t2g_cli.runtime
    from t2g_cli import app

    cfg = load_config(None, ["timeouts.models=0.4"])
    error = TimeoutError("Scope timed out after 24.0 second(s).")
    error.add_note(cfg.timeouts.exceeded("models"))

    class Stopped:
        name = "TimedOut"

        def is_completed(self) -> bool:
            return False

        def result(self, raise_on_failure: bool = True):
            return error

    monkeypatch.setattr(t2g_cli.runtime, "prepare_environment", lambda *a, **k: {"prefect": "-", "mlflow": "-"})
    monkeypatch.setattr(flows.text2grad, "text2grad", lambda **kwargs: Stopped())
    result = CliRunner().invoke(app, ["run", "-w", str(tmp_path / "ws"), "--set", "timeouts.models=0.4"])
    out = " ".join(result.output.split())
    assert result.exit_code == 1 and "pipeline TimedOut: Scope timed out after 24.0 second(s)." in out
    assert "ran longer than timeouts.models = 0.4 minute(s)" in out and "--set timeouts.models=null" in out
