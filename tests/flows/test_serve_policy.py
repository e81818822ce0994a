"""A deployment run cannot set what the serve-time policy fixes: endpoint URLs and key variables outside the allow-list,
another workspace or inbox, or unsandboxed code without the environment's opt-in. Prefect validates a flow run's
parameters before the run does anything; the served flows' parameter types carry the check, so the refusal names the
field and happens before any request. Without a policy (``t2g run``) nothing is restricted.

The real server, the real serve process and the exfiltration request itself: ``tests/e2e/test_servers.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = "http://127.0.0.1:8000/v1"


@pytest.fixture
def served(tmp_path, monkeypatch):
    """This process serves ``tmp_path/ws`` with one allowed endpoint and key variable (as deployments/serve.py sets)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("serve_script", ROOT / "deployments" / "serve.py")
    serve = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "serve_script", serve)
    spec.loader.exec_module(serve)
    monkeypatch.delenv("T2G_ALLOW_UNSANDBOXED", raising=False)
    ws = tmp_path / "ws"
    policy = serve.serve_policy(str(ws), [ALLOWED], ["T2G_TEST_KEY"])
    for name, value in policy.environment().items():
        monkeypatch.setenv(name, value)
    return serve.form_defaults(str(ws))


def _config(form: dict, **sections) -> dict:
    return {**form, **sections}


def _refusal(flow, **parameters) -> str:
    from prefect.exceptions import ParameterTypeError

    with pytest.raises(ParameterTypeError) as info:
        flow.validate_parameters(parameters)
    return str(info.value)


def test_the_exfiltration_parameters_are_refused_naming_each_field(served):
    from flows.text2grad import text2grad

    llm = {"annotator": "llm", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "SOME_SECRET_VAR"}
    message = _refusal(text2grad, config=_config(served, annotate=llm))
    assert "annotate.base_url: 'http://127.0.0.1:9/v1' is not an endpoint allowed at serve time" in message
    assert "annotate.api_key_env: 'SOME_SECRET_VAR' is not a key variable allowed at serve time" in message


def test_allowed_endpoints_and_keys_pass_and_defaults_need_none(served):
    from flows.text2grad import text2grad

    text2grad.validate_parameters({"config": served})  # the form's defaults: no endpoint, no key
    ok = {"annotator": "llm", "base_url": ALLOWED + "/", "api_key_env": "T2G_TEST_KEY"}
    text2grad.validate_parameters({"config": _config(served, annotate=ok)})


def test_every_endpoint_field_is_checked(served):
    from flows.stages import evaluate, ppo

    endpoint = {"endpoint": {"base_url": "https://elsewhere.example/v1", "api_key_env": "T2G_TEST_KEY"}}
    message = _refusal(
        ppo,
        config=_config(served, ppo={"reward_source": "endpoint"}, reward_model=endpoint),
        feedback={"path": "x", "sha256": "0", "n_rows": 1, "schema": "feedback", "key": "k"},
        models={"base": "b", "policy": "p", "base_digest": "0", "policy_digest": "0"},
        reward_model=None,
    )
    assert "reward_model.endpoint.base_url" in message
    judge = {"judge_base_url": ALLOWED, "judge_api_key_env": "HOME"}
    assert "evaluate.judge_api_key_env: 'HOME'" in _refusal(
        evaluate, config=_config(served, evaluate=judge), feedback={}, models={}, policy={}
    )


def test_workspace_inbox_and_mlflow_are_fixed_at_serve_time(served, tmp_path):
    from flows.feedback import feedback_sensor, reannotate

    other = {"root": str(tmp_path / "elsewhere")}
    assert "workspace.root" in _refusal(reannotate, config=_config(served, workspace=other))
    tracking = {**served["workspace"], "mlflow_tracking_uri": "http://attacker.example"}
    assert "workspace.mlflow_tracking_uri" in _refusal(reannotate, config=_config(served, workspace=tracking))
    assert "inbox: '/home'" in _refusal(feedback_sensor, workspace=served["workspace"], inbox="/home")
    assert "inbox" in _refusal(feedback_sensor, workspace=served["workspace"], inbox="s3://bucket/x/")
    feedback_sensor.validate_parameters({"workspace": served["workspace"], "inbox": None})


def test_unsandboxed_code_needs_the_environment_opt_in(served, monkeypatch):
    from flows.text2grad import text2grad

    unsafe = _config(served, annotate={"annotator": "code", "sandbox_isolation": "none"})
    assert "annotate.sandbox_isolation" in _refusal(text2grad, config=unsafe)
    monkeypatch.setenv("T2G_ALLOW_UNSANDBOXED", "1")
    text2grad.validate_parameters({"config": unsafe})


def test_without_a_policy_nothing_is_restricted(monkeypatch):
    from flows.text2grad import text2grad

    monkeypatch.delenv("T2G_SERVE_POLICY", raising=False)
    llm = {"annotator": "llm", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "ANY", "sandbox_isolation": "none"}
    text2grad.validate_parameters({"config": {"annotate": llm}})


def test_the_annotate_task_reads_no_secret_block():
    """Any client of the Prefect API can read a Secret block back (include_secrets): keys come from the worker's
    environment only, and the setting that named a block is gone."""
    from t2g_core.config import AnnotateConfig

    assert "api_key_secret" not in AnnotateConfig.model_fields
    assert "prefect.blocks" not in (ROOT / "tasks" / "annotate.py").read_text()
