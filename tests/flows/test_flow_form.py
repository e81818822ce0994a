"""The Prefect UI form of `text2grad` is a size preset and PipelineConfig: its schema carries every stage's field
descriptions, its sections titled and placed in the order the stages run, and `refresh` offers exactly the stage
names; a bad refresh name is a clear error. Flow modules import without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_text2grad_form_is_the_pipeline_config_with_descriptions():
    from prefect.utilities.callables import parameter_schema

    from flows.text2grad import text2grad
    from t2g_core.config import PPOConfig
    from t2g_core.stages.registry import ORDER as STAGES

    schema = parameter_schema(text2grad).model_dump_for_openapi()
    defs = schema["definitions"]
    assert set(schema["properties"]) == {"preset", "config", "refresh"}
    assert schema["properties"]["preset"]["enum"] == ["tiny", "small", "full"]
    assert schema["properties"]["preset"]["position"] == 0  # the form's first field
    sections = defs["PipelineConfig"]["properties"]
    in_order = sorted(sections, key=lambda s: sections[s]["position"])
    assert in_order[:11] == [  # the order the stages run
        "data",
        "holdout",
        "models",
        "annotate",
        "align",
        "validate",
        "warmup",
        "policy_samples",
        "reward_model",
        "ppo",
        "evaluate",
    ]
    assert sections["reward_model"]["title"] == "9 · Reward model"
    assert defs["PPOConfig"]["properties"]["steps"]["description"] == PPOConfig.model_fields["steps"].description
    assert "validate" in defs["PipelineConfig"]["properties"]
    refresh = schema["properties"]["refresh"]
    enum = next(v["items"]["enum"] for v in refresh["anyOf"] if v.get("type") == "array")
    assert tuple(enum) == STAGES


def test_the_run_forms_offer_each_training_stages_process_layout():
    """The pipeline's form and the placed training groups' forms set ``layout.<stage>`` (processes, machines, DDP or
    FSDP, what starts the machines) for the warm-up, the reward model and PPO."""
    from prefect.utilities.callables import parameter_schema

    from flows.stages import ppo, reward_model, warmup
    from flows.text2grad import text2grad
    from t2g_core.stages.registry import GANG

    assert GANG == ("warmup", "reward_model", "ppo")
    for flow in (text2grad, warmup, reward_model, ppo):
        defs = parameter_schema(flow).model_dump_for_openapi()["definitions"]
        assert defs["PipelineConfig"]["properties"]["layout"]["$ref"] == "#/definitions/LayoutConfig"
        assert defs["LayoutConfig"]["propertyNames"] == {"enum": list(GANG)}
        layout = defs["Layout"]["properties"]
        assert layout["processes"]["minimum"] == layout["machines"]["minimum"] == 1
        assert layout["accelerate"]["enum"] == ["ddp", "fsdp"]
        assert layout["launcher"]["enum"] == ["local", "slurm", "kubernetes"]


def test_refresh_names_are_checked_and_imply_downstream():
    from t2g_core.stages.registry import downstream

    assert downstream(["ppo"]) == {"ppo", "evaluate"}
    assert downstream(None) == set()
    with pytest.raises(ValueError, match="unknown stage"):
        downstream(["ppo", "polish"])


@pytest.mark.slow  # a fresh interpreter importing the flows
def test_flow_modules_import_without_heavy_libraries():
    code = (
        "import sys, flows.text2grad, flows.feedback, t2g_mlflow.lineage, t2g_cli.summary\n"
        "print(','.join(m for m in ('torch', 'transformers', 'mlflow', 'peft') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_a_placed_stage_sends_parameters_its_deployment_schema_accepts(monkeypatch, tmp_path):
    """A retried pipeline reloads finished stages' results; one may come back as the model's plain fields
    (``schema_name``). The placed stage's parameters must still validate against the deployment's parameter schema
    (``schema``), as the Prefect server checks them on create_flow_run."""
    import jsonschema
    import prefect.deployments
    from prefect.utilities.callables import parameter_schema

    from flows import placement
    from flows.stages import evaluate
    from t2g_core.config import load_config
    from t2g_core.stages.refs import ModelsRef, PolicyRef
    from t2g_core.store import ArtifactRef

    sent = {}

    class _Stop(Exception):
        pass

    def run_deployment(name, parameters, as_subflow):
        sent.update(parameters)
        raise _Stop

    monkeypatch.setattr(placement, "deployment_on_pool", lambda flow, pool: f"{flow}/{pool}")
    monkeypatch.setattr(prefect.deployments, "run_deployment", run_deployment)
    feedback = ArtifactRef(path=str(tmp_path), sha256="a", n_rows=1, schema="feedback", key="k")
    params = {
        "config": load_config(None, [f"workspace.root={tmp_path}"]),
        "feedback": feedback.model_dump(mode="json"),  # plain fields, as a reloaded result may be
        "models": ModelsRef.model_construct(),
        "policy": PolicyRef.model_construct(),
        "forced": [],
    }
    with pytest.raises(_Stop):
        placement.placed(evaluate, "gpu", **params)
    schema = parameter_schema(evaluate).model_dump_for_openapi()
    sub = {"definitions": schema["definitions"], **schema["properties"]["feedback"]}
    jsonschema.validate(sent["feedback"], sub)
    assert sent["feedback"]["schema"] == "feedback"


def test_every_stage_group_is_a_flow_of_its_name():
    import flows.stages
    from t2g_core.stages.registry import GROUPS

    for group in GROUPS:
        assert getattr(flows.stages, group).name == group


@pytest.mark.slow  # the Prefect harness
def test_an_inline_stage_group_sends_no_heartbeats_of_its_own(prefect_harness):
    """The pipeline's flow run keeps Prefect's heartbeats; a stage group run inline (its subflow) sends none, so its
    end does not wait up to a second for a heartbeat thread to wake (before: about 8 s of a pipeline run)."""
    from prefect import flow
    from prefect.settings import get_current_settings, temporary_settings

    from flows.placement import placed

    @flow
    def stage() -> int | None:
        return get_current_settings().flows.heartbeat_frequency

    @flow
    def pipeline() -> tuple[int | None, int | None]:
        return get_current_settings().flows.heartbeat_frequency, placed(stage, None)

    with temporary_settings(updates={"flows.heartbeat_frequency": 180}):  # Prefect's default (the harness sends none)
        outer, inner = pipeline()
    assert outer == 180 and inner is None
