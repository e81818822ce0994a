"""A deployment run cannot set what the serve-time policy fixes: endpoint URLs and key variables outside the allow-list,
another workspace or inbox, unsandboxed code without the environment's opt-in, an input file or model folder outside
the folders runs may read (symlinks followed), a Hugging Face id unless allowed, or a stage reference outside the
workspace. Prefect validates a flow run's
parameters before the run does anything; the served flows' parameter types carry the check, so the refusal names the
field and happens before any request. Without a policy (``t2g run``) nothing is restricted.

The real server, the real serve process and the exfiltration request itself: ``tests/e2e/test_servers.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = "http://127.0.0.1:8000/v1"


def _serve_script(monkeypatch):
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("serve_script", ROOT / "deployments" / "serve.py")
    serve = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "serve_script", serve)
    spec.loader.exec_module(serve)
    return serve


@pytest.fixture
def served(tmp_path, monkeypatch):
    """This process serves ``tmp_path/ws`` with one allowed endpoint and key variable (as deployments/serve.py sets)."""
    serve = _serve_script(monkeypatch)
    monkeypatch.delenv("T2G_ALLOW_UNSANDBOXED", raising=False)
    ws = tmp_path / "ws"
    _serve_under(monkeypatch, serve.serve_policy(str(ws), [ALLOWED], ["T2G_TEST_KEY"]))
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


@pytest.fixture
def secret(tmp_path) -> Path:
    """A private file of the serving user outside the workspace (what the exfiltration request read)."""
    path = tmp_path / "private" / "secret.json"
    path.parent.mkdir()
    path.write_text('{"user": "alice", "password": "hunter2-canary"}\n')
    path.chmod(0o600)
    return path


def test_the_file_exfiltration_request_is_refused_naming_the_field(served, secret):
    from flows.text2grad import text2grad

    data = {
        "source": "hub",
        "dataset": str(secret),
        "columns": {"id": "password", "prompt": "user", "response": "user"},
    }
    message = _refusal(text2grad, config=_config(served, data=data))
    assert f"data.dataset: '{secret}' is not under a folder runs may read at serve time" in message
    assert "hunter2" not in message


INPUTS = {  # each input path setting, as a section of the config naming ``path``
    "data.source": lambda path: {"data": {"source": path}},
    "data.dataset": lambda path: {
        "data": {"source": "hub", "dataset": path, "columns": {"prompt": "q", "response": "a"}}
    },
    "models.policy": lambda path: {"models": {"policy": path}},
    "models.reward_model_base": lambda path: {"models": {"reward_model_base": path}},
    "ppo.reward_model_path": lambda path: {"ppo": {"reward_model_path": path}},
}


@pytest.mark.parametrize("field", INPUTS)
def test_each_input_path_is_read_only_under_the_input_roots(served, secret, tmp_path, field):
    from flows.text2grad import text2grad

    assert f"{field}: '{secret.parent}'" in _refusal(
        text2grad, config=_config(served, **INPUTS[field](str(secret.parent)))
    )
    inside = tmp_path / "ws" / "inbox" / "mine"
    inside.mkdir()
    text2grad.validate_parameters({"config": _config(served, **INPUTS[field](str(inside)))})
    link = tmp_path / "ws" / "inbox" / "link"  # inside a root, pointing outside: resolved, refused
    link.symlink_to(secret.parent)
    assert f"{field}: '{link}'" in _refusal(text2grad, config=_config(served, **INPUTS[field](str(link))))
    traversal = f"{tmp_path}/ws/inbox/../../private"
    assert f"{field}: '{traversal}'" in _refusal(text2grad, config=_config(served, **INPUTS[field](traversal)))


def test_the_workspace_credentials_and_databases_are_not_inputs(served, tmp_path):
    from flows.text2grad import text2grad

    auth = tmp_path / "ws" / "run" / "prefect-auth"
    auth.parent.mkdir(parents=True)
    auth.write_text("t2g:0123456789abcdef")
    for path in (auth, tmp_path / "ws" / "mlflow.db", tmp_path / "ws"):
        assert "data.source" in _refusal(text2grad, config=_config(served, data={"source": str(path)}))


def _serve_under(monkeypatch, policy) -> None:
    for name, value in policy.environment().items():
        monkeypatch.setenv(name, value)


def test_extra_input_roots_and_hub_ids_only_when_served_so(tmp_path, monkeypatch, secret):
    from flows.text2grad import text2grad

    serve = _serve_script(monkeypatch)
    form = serve.form_defaults(str(tmp_path / "ws"))
    hub = _config(form, models={"policy": "HuggingFaceTB/SmolLM2-135M@main"})
    mine = _config(form, data={"source": str(secret)})
    _serve_under(monkeypatch, serve.serve_policy(str(tmp_path / "ws"), [], []))
    assert "models.policy: 'HuggingFaceTB/SmolLM2-135M@main' is a Hugging Face id" in _refusal(text2grad, config=hub)
    assert "data.source" in _refusal(text2grad, config=mine)
    _serve_under(monkeypatch, serve.serve_policy(str(tmp_path / "ws"), [], [], [str(secret.parent)], hub_ids=True))
    text2grad.validate_parameters({"config": hub})
    text2grad.validate_parameters({"config": mine})


def test_a_stage_flow_refuses_a_reference_outside_the_workspace(served, secret, tmp_path):
    """A stage-group flow deployed on a work pool takes references from whoever starts it: each file they name must
    lie under the workspace (or an input root)."""
    from flows.stages import annotate, evaluate

    foreign = {"path": str(secret), "sha256": "0", "n_rows": 1, "schema": "feedback", "key": "k"}
    message = _refusal(annotate, config=served, feedback=foreign)
    assert f"ArtifactRef: '{secret}' is not under a folder runs may read" in message
    models = {"base": str(tmp_path / "ws" / "models" / "b"), "policy": str(secret.parent), "base_digest": "0"}
    policy = {"adapter_dir": "/etc", "run_dir": str(tmp_path / "ws" / "checkpoints"), "digest": "0", "steps": 1}
    message = _refusal(
        evaluate,
        config=served,
        feedback={**foreign, "path": str(tmp_path / "ws" / "artifacts" / "feedback" / "k")},
        models={**models, "policy_digest": "0"},
        policy={**policy, "history_path": str(tmp_path / "ws" / "checkpoints" / "h.json")},
    )
    assert f"ModelsRef: '{secret.parent}'" in message and "PolicyRef: '/etc'" in message
    assert "ArtifactRef:" not in message and "h.json" not in message
    inside = {**foreign, "path": str(tmp_path / "ws" / "artifacts" / "feedback" / "k")}
    annotate.validate_parameters({"config": served, "feedback": inside})


def test_the_annotate_task_reads_no_secret_block():
    """Any client of the Prefect API can read a Secret block back (include_secrets): keys come from the worker's
    environment only, and the setting that named a block is gone."""
    from t2g_core.config import AnnotateConfig

    assert "api_key_secret" not in AnnotateConfig.model_fields
    assert "prefect.blocks" not in (ROOT / "tasks" / "annotate.py").read_text()
