"""Size presets: a whole run at a chosen size, with the user's own settings on top.

- ``tiny``: the pipeline end to end in a few minutes on a laptop CPU, to see every stage work; its figures mean
  nothing (24 demo items, a few steps per stage, ``checks.small_tagger_data`` accepted).
- ``small``: the demo's data and models with half its PPO steps and half its evaluation prompts.
- ``full``: the embedded defaults, the demo the README measures.

``t2g run --preset NAME`` applies the preset first, then the ``-c`` file, then ``--set`` overrides
(:func:`t2g_core.config.load_config`). The Prefect form's ``preset`` applies it to every field the form left at its
default (:func:`with_preset`): a field changed in the form keeps its value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from t2g_core.config import PipelineConfig

Preset = Literal["tiny", "small", "full"]

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "data": {"n_items": 24},
        "models": {
            "tiny": {
                "hidden_size": 32,
                "num_heads": 2,
                "warm_start_steps": 5,
                "policy_sft_steps": 5,
                "warm_start_batch_size": 8,
                "policy_sft_batch_size": 8,
            }
        },
        "validate": {"review": "auto", "sample_size": 8},
        "reward_model": {"max_steps": 2, "batch_size": 4, "max_new_tokens": 16},
        "ppo": {
            "steps": 4,
            "batch_size": 4,
            "minibatches": 1,
            "ppo_epochs": 1,
            "max_new_tokens": 12,
            "eval_every": 2,
            "log_every": 2,
            "save_every": 2,
        },
        "evaluate": {"max_prompts": 4, "max_new_tokens": 12, "bootstrap_samples": 100},
        "checks": {"small_tagger_data": True},
    },
    "small": {
        "ppo": {"steps": 20},
        "evaluate": {"max_prompts": 64, "bootstrap_samples": 1000},
    },
    "full": {},
}


def merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` written over it, section by section (``top`` wins on every leaf it has)."""
    out = dict(base)
    for key, value in top.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _changed(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The leaves of ``values`` that differ from ``defaults`` (sections kept nested)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        default = defaults.get(key)
        if isinstance(value, dict) and isinstance(default, dict):
            inner = _changed(value, default)
            if inner:
                out[key] = inner
        elif value != default:
            out[key] = value
    return out


def with_preset(config: PipelineConfig, preset: Preset | None) -> PipelineConfig:
    """``config`` with ``preset`` applied to every field still at its default (None: ``config`` unchanged)."""
    if not PRESETS.get(preset or "full"):  # None and "full": the defaults as they are
        return config
    cls = type(config)
    defaults = cls().model_dump(mode="json", by_alias=True)
    mine = _changed(config.model_dump(mode="json", by_alias=True), defaults)
    return cls.model_validate(merged(merged(defaults, PRESETS[preset]), mine))
