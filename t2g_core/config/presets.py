"""Size presets: a whole run at a chosen size, with the user's own settings on top.

- ``tiny``: the pipeline end to end in a few minutes on a laptop CPU, to see every stage work; its figures mean
  nothing (24 demo items, the smoke-sized models, a few steps per stage; a reward model that weak is accepted:
  ``checks.small_tagger_data`` and ``ppo.reward_model_gate.allow_weak``).
- ``small``: the demo's data and models with half its PPO steps and half its evaluation prompts.
- ``full``: the embedded defaults, the demo the README measures.

``t2g run --preset NAME`` applies the preset first, then the ``-c`` file, then ``--set`` overrides
(:func:`t2g_core.config.load_config`): a value given in either wins, the default value too. The Prefect form's
``preset`` applies it to every field the form left at its default (:func:`with_preset`): a field changed in the form
keeps its value. The form posts every field, values only, so it cannot tell a default left alone from the same value
typed in; there a default under a preset takes the preset's value (``t2g run --preset NAME --set FIELD=DEFAULT`` keeps
it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from t2g_core.config.base import merged

if TYPE_CHECKING:
    from t2g_core.config import PipelineConfig

Preset = Literal["tiny", "small", "full"]

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "data": {"n_items": 24},
        "models": {"tiny": "smoke"},
        "validate": {"review": "auto", "sample_size": 8},
        "reward_model": {"max_steps": 2, "batch_size": 4, "max_new_tokens": 16},
        "ppo": {
            "steps": 4,
            "batch_size": 4,
            "minibatches": 1,
            "ppo_epochs": 1,
            "sampling": {"max_new_tokens": 12},
            "eval_every": 2,
            "log_every": 2,
            "save_every": 2,
            "reward_model_gate": {"allow_weak": True},  # two steps on 24 items cannot reach the quality floors
            "critique_loop": {"panel": 4, "refresh_steps": 2},  # its round and refresh run, at the preset's size
        },
        "evaluate": {"max_prompts": 4, "sampling": {"max_new_tokens": 12}, "bootstrap_samples": 100},
        "checks": {"small_tagger_data": True},
    },
    "small": {
        "ppo": {"steps": 20},
        "evaluate": {"max_prompts": 64, "bootstrap_samples": 1000},
    },
    "full": {},
}


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
