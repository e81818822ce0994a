"""Every setting reaches the stage that reads it, and changing it re-runs that stage and its dependents only.

The table of which sections each stage reads is ``t2g_core.stages.registry.STAGE_SECTIONS``. Three checks, derived
from the pydantic models (every leaf field of ``PipelineConfig``):
- the real ``text2grad`` flow, run under Prefect with each stage task replaced by a recording stand-in, hands every
  stage exactly its sections, each with the non-default value the user set (before: PPO rebuilt a config from its
  own section and read ``data``, ``align`` and ``reward_model`` from defaults);
- changing any one field changes the cache key of exactly the stages that read its section;
- under a real Prefect API, a changed field re-runs that stage and the stages downstream of its output, and
  everything else comes back Cached.
"""

from __future__ import annotations

import hashlib
import json
import typing
from pathlib import Path

import pytest
from prefect import task
from pydantic import BaseModel, RootModel

from t2g_core.config import PipelineConfig
from t2g_core.config.stages import NOT_STAGE_INPUTS, StageSettings
from t2g_core.stages.context import fingerprint
from t2g_core.stages.refs import (
    ArtifactRef,
    EvaluationRef,
    ModelsRef,
    PolicyRef,
    PolicySamplesRef,
    ReviewSampleRef,
    RewardModelRef,
    ValidationRef,
)
from t2g_core.stages.registry import ORDER, STAGE_SECTIONS, STAGES, settings_for

ROOT = Path(__file__).resolve().parents[2]
# fields whose other values need a partner change or the outside world; each is changed in ALL_CHANGES below
PAIRED = {"evaluate.pass_k", "data.dataset", "data.source", "data.columns"}  # data.columns: tests/core/test_ingest.py
ONE_VALUE = {"ppo.lora.dropout"}  # the shared LoRA shape's dropout, which PPO refuses unless 0: never changed
# settings a stage outside its sections also reads, as its settings model declares (policy_samples.sampling null
# samples as PPO's rollouts do)
ALSO_READ = {extra.split()[0] + ".": {s.name} for s in STAGES for extra in s.settings.ALSO_READS}


# ------------------------------------------------------------------------------------------ non-default values
# {stage or group: value} settings
KEYED = {"placement": {"ppo": "changed-pool"}, "layout": {"ppo": {"processes": 2}}, "timeouts": {"ppo": 90.0}}


def _other_value(annotation, default, metadata):
    if isinstance(annotation, type) and issubclass(annotation, RootModel):
        return next(v for k, v in KEYED.items() if annotation is PipelineConfig.model_fields[k].annotation)
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return next(a for a in args if a != default)
    if bool in args:  # bool | Literal["auto"]: a setting switched on, off or left to its rule
        return False if default == "auto" else not default
    if type(None) in args:  # X | None
        inner = next(a for a in args if a is not type(None))
        return _other_value(inner, default, metadata) if default is not None else _fresh(inner, metadata)
    if annotation is bool:
        return not default
    if annotation is int:
        return default + 1
    if annotation is float:
        return _other_float(default, metadata)
    if annotation is str:
        return f"{default}-changed"
    if typing.get_origin(annotation) is tuple:  # a pair of numbers (annotate.price_per_1k)
        return [d + 1.0 for d in default]
    if typing.get_origin(annotation) is list or annotation == list[str] | str:
        return ["changed_proj"]
    raise NotImplementedError(f"no non-default value for {annotation}")


def _fresh(annotation, metadata):
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):  # a section that is off by default (null)
        return {n: _other_value(f.annotation, f.default, f.metadata) for n, f in annotation.model_fields.items()}
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)[0]
    return {int: 3, float: 0.5, str: "changed"}[annotation] if annotation in (int, float, str) else None


def _other_float(default: float, metadata) -> float:
    upper = next((getattr(m, a) for m in metadata for a in ("le", "lt") if hasattr(m, a)), None)
    lower = next((getattr(m, a) for m in metadata for a in ("ge", "gt") if hasattr(m, a)), 0.0)
    if upper is not None:
        return (default + upper) / 2 if default < upper else (default + lower) / 2
    return default * 1.5 + 0.1


def leaf_fields(model: BaseModel, prefix: str = ""):
    """(dotted path as YAML spells it, annotation, default, metadata) of every leaf field."""
    for name, field in type(model).model_fields.items():
        value, path = getattr(model, name), f"{prefix}{field.alias or name}"
        if isinstance(value, BaseModel) and not isinstance(value, RootModel):  # a keyed section is one setting
            yield from leaf_fields(value, f"{path}.")
        else:
            yield path, field.annotation, value, field.metadata


def _set(data: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    for key in parents:
        data = data.setdefault(key, {})
    data[last] = value


def _changes() -> dict[str, object]:
    out = {
        path: _other_value(ann, default, meta)
        for path, ann, default, meta in leaf_fields(PipelineConfig())
        if path not in PAIRED | ONE_VALUE
    }
    out.update(
        {
            "evaluate.pass_k": [1, 2],
            "ppo.reward_mode": "dense",  # a hybrid mode: the changed terminal_coef is refused in scalar and uniform
            "ppo.batch_size": 66,  # divides by the changed minibatches (3) and group_size (2)
            "data.dataset": "slf5k",
            "data.source": str(ROOT / "tests" / "fixtures" / "datasets" / "tiny" / "slf5k"),
        }
    )
    return out


ALL_CHANGES = _changes()


def config_with(changes: dict, root: Path) -> PipelineConfig:
    data: dict = {}
    for path, value in changes.items():
        _set(data, path, value)
    _set(data, "workspace.root", str(root))
    _set(data, "workspace.mlflow_tracking_uri", f"sqlite:///{root / 'mlflow.db'}")
    return PipelineConfig.model_validate(data)


# ------------------------------------------------------------------------------------------ recording stand-ins
RECORDED: dict[str, list[StageSettings]] = {}
EXECUTED: list[str] = []
RECEIVED: dict[str, list[tuple]] = {}  # stage -> the references each call was given
PRODUCED: dict[str, list] = {}  # stage -> what each call returned


def _digest(params: dict) -> str:
    blob = json.dumps(fingerprint(params), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _file(root: Path, name: str, digest: str) -> str:
    path = root / "stand-in" / f"{name}-{digest[:12]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"digest": digest}))
    return str(path)


def _artifact(name: str, digest: str) -> ArtifactRef:
    return ArtifactRef(path=f"/stand-in/{name}", sha256=digest, n_rows=1, schema=name, key=digest[:20])


def _outputs(stage: str, digest: str, root: Path):
    if stage in ("feedback", "annotate", "align"):
        return _artifact(stage, digest)
    if stage in ("models", "warmup"):
        return ModelsRef(base="base", policy="policy", base_digest=digest, policy_digest=digest)
    if stage == "policy_samples":
        return PolicySamplesRef(feedback=_artifact("samples", digest), annotations=_artifact("labels", digest))
    if stage == "review_sample":
        return ReviewSampleRef(key=digest[:8], n_items=1, sample=_file(root, stage, digest))
    if stage == "auto_review":
        return {"verdicts": digest}
    if stage == "validate":
        path = _file(root, stage, digest)
        return ValidationRef(status="pass", report=path, chart=path, json_path=path)
    if stage == "reward_model":
        return RewardModelRef(
            model_dir=f"/stand-in/{digest}", base="base", rm_data=_artifact("rm_data", digest), digest=digest
        )
    if stage == "ppo":
        return PolicyRef(
            adapter_dir=f"/stand-in/{digest}",
            run_dir=f"/stand-in/{digest}",
            digest=digest,
            steps=1,
            history_path="/stand-in/h.json",
        )
    return EvaluationRef(path="/stand-in", summary=_file(root, stage, digest), report="r", n_rows=1, task="qa")


def stand_in(stage: str, root: Path):
    """A cached Prefect task that records its settings and returns outputs whose identity hashes its inputs."""

    @task(name=f"stand-in-{stage}".replace("_", "-"))
    def recorder(*args, **kwargs):
        params = {"args": args, "kwargs": kwargs}
        settings = [a for a in (*args, *kwargs.values()) if isinstance(a, StageSettings)]
        RECORDED.setdefault(stage, []).extend(settings)
        EXECUTED.append(stage)
        RECEIVED.setdefault(stage, []).append((*args, *kwargs.values()))
        out = _outputs(stage, _digest({"stage": stage, **params}), root)
        PRODUCED.setdefault(stage, []).append(out)
        return out

    return recorder


@pytest.fixture
def stand_ins(monkeypatch, tmp_path, prefect_harness):
    import tasks.align
    import tasks.annotate
    import tasks.data
    import tasks.evaluate
    import tasks.pipeline
    import tasks.policy_samples
    import tasks.ppo
    import tasks.reward_model
    import tasks.validate
    import tasks.warmup

    spies = {
        name: stand_in(name, tmp_path)
        for name in (
            "feedback",
            "models",
            "annotate",
            "align",
            "review_sample",
            "auto_review",
            "validate",
            "reward_model",
            "warmup",
            "policy_samples",
            "ppo",
            "evaluate",
        )
    }
    monkeypatch.setattr(tasks.data, "materialise_feedback", spies["feedback"])
    monkeypatch.setattr(tasks.data, "build_models", spies["models"])
    monkeypatch.setattr(tasks.annotate, "annotate_task", lambda settings: spies["annotate"])
    monkeypatch.setattr(tasks.align, "align", spies["align"])
    monkeypatch.setattr(tasks.validate, "draw_review_sample", spies["review_sample"])
    monkeypatch.setattr(tasks.validate, "auto_review", spies["auto_review"])
    monkeypatch.setattr(tasks.validate, "validation_report", spies["validate"])
    monkeypatch.setattr(tasks.reward_model, "train_reward_model", spies["reward_model"])
    monkeypatch.setattr(tasks.warmup, "warm_up", spies["warmup"])
    monkeypatch.setattr(tasks.policy_samples, "sample_task", lambda settings: spies["policy_samples"])
    monkeypatch.setattr(tasks.ppo, "train_policy", spies["ppo"])
    monkeypatch.setattr(tasks.evaluate, "evaluate_policy", spies["evaluate"])
    import flows.text2grad

    record = task(name="stand-in-record")(lambda outputs, ws: None)
    monkeypatch.setattr(tasks.pipeline, "record_outputs", record)
    monkeypatch.setattr(flows.text2grad, "record_outputs", record)  # imported by name when the flow module loads
    for record in (RECORDED, EXECUTED, RECEIVED, PRODUCED):
        record.clear()
    return tmp_path


def _run(config: PipelineConfig):
    import flows.text2grad as pipeline

    state = pipeline.text2grad(config=config, return_state=True)
    assert state.is_completed(), state
    assert tuple(state.result()) == ORDER  # the outputs are keyed by the stage table's names, in its order


# ------------------------------------------------------------------------------------------ the tests
def test_the_table_covers_every_section():
    sections = {f.alias or n for n, f in PipelineConfig.model_fields.items()}
    read = {s for secs in STAGE_SECTIONS.values() for s in secs}
    assert read | set(NOT_STAGE_INPUTS) == sections and not read & set(NOT_STAGE_INPUTS)
    assert STAGE_SECTIONS["ppo"] == ("ppo", "holdout", "align", "reward_model", "models", "annotate")


@pytest.mark.slow
def test_every_setting_reaches_the_stage_that_reads_it(stand_ins, monkeypatch):
    # placement names work pools, layout starts processes that run no stand-ins (both orchestration; the layout's test:
    # tests/tasks/test_gang.py); "ui" review would pause for a person: keep them at values that run
    orchestration = ("placement", "layout")
    changes = {k: v for k, v in ALL_CHANGES.items() if k not in orchestration} | {"validate.review": "offline"}
    config = config_with(changes, stand_ins)
    _run(config)
    defaults = PipelineConfig()
    for stage in ORDER:
        recorded = RECORDED["validate" if stage == "validate" else stage]
        assert recorded, f"stage {stage} was not called with its settings"
        got = recorded[-1].model_dump(mode="json", by_alias=True)
        assert tuple(got) == STAGE_SECTIONS[stage], stage
        for section, values in got.items():
            assert values == getattr(config, section if section != "validate" else "validate_").model_dump(
                mode="json", by_alias=True
            ), (stage, section)
            default = getattr(defaults, section if section != "validate" else "validate_").model_dump(mode="json")
            differs = [k for k in values if values[k] != default.get(k) and not isinstance(values[k], dict)]
            assert differs, f"{stage}.{section}: no non-default value arrived"
    warmed = PRODUCED["warmup"][-1]  # warmup.enabled: PPO and the evaluation start from the warmed-up policy
    assert all(warmed in RECEIVED[stage][-1] for stage in ("policy_samples", "ppo", "evaluate"))
    assert PRODUCED["policy_samples"][-1] in RECEIVED["reward_model"][-1]  # policy_samples.enabled: they train it
    ppo = RECORDED["ppo"][-1]
    assert ppo.holdout.eval_fraction == changes["holdout.eval_fraction"]
    assert ppo.align.positive_value == changes["align.positive_value"] != 1.0


def _keys(config: PipelineConfig, stage_fns: dict) -> dict[str, str]:
    from tasks.caching import task_key

    return {stage: task_key(fn, {"settings": settings_for(stage, config)}) for stage, fn in stage_fns.items()}


def test_changing_one_setting_changes_the_keys_of_exactly_the_stages_that_read_it(tmp_path):
    from tasks import align, annotate, data, evaluate, policy_samples, ppo, reward_model, validate, warmup

    stage_fns = {
        "feedback": data.materialise_feedback,
        "models": data.build_models,
        "annotate": annotate.annotate_critic,
        "align": align.align,
        "validate": validate.validation_report,
        "reward_model": reward_model.train_reward_model,
        "warmup": warmup.warm_up,
        "policy_samples": policy_samples.sample_critic,
        "ppo": ppo.train_policy,
        "evaluate": evaluate.evaluate_policy,
    }
    base = config_with({}, tmp_path)
    before = _keys(base, stage_fns)
    checked = 0
    for path, value in ALL_CHANGES.items():
        if path in PAIRED or path.startswith("workspace."):
            continue
        changed = _keys(config_with({path: value}, tmp_path), stage_fns)
        section = path.split(".")[0]
        expected = {s for s, secs in STAGE_SECTIONS.items() if section in secs}
        expected |= {s for prefix, stages in ALSO_READ.items() if path.startswith(prefix) for s in stages}
        assert {s for s in stage_fns if changed[s] != before[s]} == expected, path
        checked += 1
    assert checked > 150  # every leaf field but the paired ones


RERUNS = [
    ("holdout.eval_fraction", 0.5, {"ppo", "evaluate"}),  # the defect: PPO ignored it and did not even re-run
    (
        "align.positive_value",
        2.0,
        {"align", "review_sample", "auto_review", "validate", "reward_model", "ppo", "evaluate"},
    ),
    ("evaluate.max_prompts", 7, {"evaluate"}),
]


@pytest.mark.slow
def test_a_changed_setting_reruns_its_stage_and_what_depends_on_it(stand_ins):
    _run(config_with({}, stand_ins))
    for path, value, rerun in RERUNS:  # each against the cached baseline
        EXECUTED.clear()
        _run(config_with({path: value}, stand_ins))
        assert set(EXECUTED) == rerun, path
