"""Typed configuration: YAML + overrides, strict and frozen, every field documented."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel, RootModel, ValidationError

from t2g_core.config import PipelineConfig, StageConfig, load_config


def test_defaults_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("ppo:\n  steps: 7\n  reward_mode: scalar\nvalidate:\n  sample_size: 5\n", encoding="utf-8")
    cfg = load_config(path, ["ppo.steps=9", "align.fuzzy_threshold=90"])
    assert cfg.ppo.steps == 9 and cfg.ppo.reward_mode == "scalar"
    assert cfg.validate_.sample_size == 5 and cfg.align.fuzzy_threshold == 90


def test_unknown_and_invalid_fields_are_rejected(tmp_path):
    with pytest.raises(ValidationError, match="stepz"):
        load_config(None, ["ppo.stepz=3"])
    with pytest.raises(ValidationError, match="reward_mode"):
        load_config(None, ["ppo.reward_mode=banana"])
    with pytest.raises(ValueError, match="key.path=value"):
        load_config(None, ["ppo.steps"])


def test_configs_are_frozen():
    cfg = PipelineConfig()
    with pytest.raises(ValidationError):
        cfg.ppo.steps = 3  # type: ignore[misc]


def _walk(model: type[BaseModel], prefix: str = ""):
    for name, field in model.model_fields.items():
        yield f"{prefix}{name}", field
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, StageConfig):
            yield from _walk(ann, f"{prefix}{name}.")


def test_every_field_is_documented():
    undocumented = [name for name, field in _walk(PipelineConfig) if not field.description]
    assert undocumented == []


def _models_in(annotation):
    """The pydantic models an annotation holds: itself, or inside ``X | None``, ``list[X]``, ``dict[K, X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _sections_in(annotation) -> list:
    """The models an annotation holds that are sections of settings (a keyed map, a ``RootModel``, is one setting)."""
    return [m for m in _models_in(annotation) if not issubclass(m, RootModel)]


def _every_field(model: type[BaseModel], prefix: str = ""):
    """Every field of ``model`` and of the models nested in it, optional ones (``policy_samples.sampling``) too."""
    for name, field in model.model_fields.items():
        yield f"{prefix}{name}", field
        for inner in _models_in(field.annotation):
            yield from _every_field(inner, f"{prefix}{name}.")


def test_every_field_description_is_one_short_line():
    """A description is the one line a form, `t2g config` and the docs' tables show; the reasons live in the docs."""
    paths = [path for path, _ in _every_field(PipelineConfig)]
    assert "ppo.sampling.temperature" in paths and "ppo.lora.r" in paths  # the walk reaches nested sections
    assert "policy_samples.sampling.top_p" in paths  # and the models inside an optional field
    too_long = {path: len(f.description) for path, f in _every_field(PipelineConfig) if len(f.description or "") > 120}
    assert too_long == {}


def test_the_form_stays_within_its_budget_of_settings():
    """Issue 33's budget: at most 240 leaf settings (a section counts its leaves; a keyed map such as placement counts
    one). A new capability pays for its settings by folding others that say one idea twice."""
    sections = {path for path, field in _every_field(PipelineConfig) if _sections_in(field.annotation)}
    leaves = [path for path, _ in _every_field(PipelineConfig) if path not in sections and ".root" not in path]
    assert "ppo.sampling.temperature" in leaves and "ppo.sampling" not in leaves and "layout" in leaves
    assert len(leaves) <= 240, len(leaves)


@pytest.mark.parametrize(
    ("setting", "old", "new"),
    [
        ("ppo.temperature=0.5", "ppo.temperature", "ppo.sampling.temperature"),
        ("ppo.max_new_tokens=8", "ppo.max_new_tokens", "ppo.sampling.max_new_tokens"),
        ("policy_samples.top_k=5", "policy_samples.top_k", "policy_samples.sampling.top_k"),
        ("evaluate.do_sample=false", "evaluate.do_sample", "evaluate.sampling.temperature"),
        ("evaluate.max_new_tokens=8", "evaluate.max_new_tokens", "evaluate.sampling.max_new_tokens"),
        ("warmup.lora_r=4", "warmup.lora_r", "warmup.lora.r"),
        ("ppo.lora_target_modules=[q_proj]", "ppo.lora_target_modules", "ppo.lora.target_modules"),
        ("reward_model.lora_dropout=0", "reward_model.lora_dropout", "reward_model.lora.dropout"),
        ("ppo.advantage=rloo", "ppo.advantage", "ppo.advantage_estimator"),
        ("ppo.grpo_scale=position_std", "ppo.grpo_scale", "ppo.grpo_std_floor"),
        ("ppo.adaptive_kl=true", "ppo.adaptive_kl", "ppo.target_kl"),
        ("ppo.run_name=mine", "ppo.run_name", "--run-dir"),
        (
            "ppo.critique_loop.alarm_gain_noise=2",
            "ppo.critique_loop.alarm_gain_noise",
            "the paired gap test",
        ),
        (
            "ppo.critique_loop.alarm_gain_check=false",
            "ppo.critique_loop.alarm_gain_check",
            "alarm_false_rate",
        ),
        ("models.tiny.hidden_size=32", "models.tiny", "the name of a size (demo, mini or smoke)"),
        ("align.good_span_reward=per_token", "align.good_span_reward", "align.span_reward"),
        ("align.poor_span_reward=per_span", "align.poor_span_reward", "align.span_reward"),
        ("align.neutral_value=0.5", "align.neutral_value", "fixed at 0"),
        ("annotate.price_per_1k_prompt=0.1", "annotate.price_per_1k_prompt", "annotate.price_per_1k"),
        ("ppo.value_max_grad_norm=0.5", "ppo.value_max_grad_norm", "ppo.max_grad_norm"),
        ("reward_model.save_total_limit=3", "reward_model.save_total_limit", "fixed at 2"),
        ("reward_model.eval_examples=3", "reward_model.eval_examples", "fixed at 5"),
        ("workspace.stale_temp_hours=1", "workspace.stale_temp_hours", "fixed at 24 hours"),
    ],
)
def test_a_renamed_setting_is_refused_with_its_new_name(setting, old, new):
    with pytest.raises(ValidationError) as refused:
        load_config(None, [setting])
    message = str(refused.value)
    assert f"{old} is now" in message and new in message, message


def test_round_trip_through_json_schema_names():
    dumped = PipelineConfig().model_dump(mode="json", by_alias=True)
    assert "validate" in dumped and PipelineConfig.model_validate(dumped) == PipelineConfig()


def _descriptions(model, prefix=""):
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        yield f"{prefix}{name}", field.description
        if isinstance(value, BaseModel):
            yield from _descriptions(value, f"{prefix}{name}.")


def test_every_field_is_documented_in_markdown_safe_text():
    """The Prefect UI renders descriptions as Markdown: a bare ``<workspace>`` is swallowed as an HTML tag (the form
    showed "default sqlite:////mlflow.db"); placeholders belong in backticks."""
    import re

    for path, text in _descriptions(PipelineConfig()):
        assert text, f"{path} has no description"
        outside_code = re.sub(r"`[^`]*`", "", text)
        assert not re.search(r"<[A-Za-z/]", outside_code), f"{path}: {text!r}"


def test_the_demo_runs_the_papers_loop_by_default():
    """One set of defaults (the demo, `t2g run` and the UI form): PPO is driven by the reward model the pipeline
    trains (the tagger, started from the policy), not by the oracle critic; recipes that want the oracle say so."""
    cfg = PipelineConfig()
    assert cfg.ppo.reward_source == "reward_model"
    assert (cfg.reward_model.kind, cfg.reward_model.init_from) == ("tagger", "policy")
    assert cfg.data.n_items >= 1000  # what the tagger needs to catch invented values (benchmarks/bench_rm.py)
