"""Base class for every stage config: frozen, no unknown keys, every field documented once, in one line."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, RootModel, model_validator


def recipe_path(*keywords: str) -> dict:
    """``json_schema_extra`` of a field naming an input file or folder: a relative path written in a recipe file is
    resolved against the recipe's folder (``config.load_config``); ``keywords`` are values that are not paths."""
    return {"recipe_path": list(keywords)}


def merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` written over it, section by section (``top`` wins on every leaf it has)."""
    out = dict(base)
    for key, value in top.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def refuse_renamed(section: str, data: Any, renamed: dict[str, str]) -> Any:
    """``data`` unchanged, or a clear error naming the new name of each renamed key in it (``old: new``; a new name
    in backticks is not a setting)."""
    old = sorted(set(data) & set(renamed)) if isinstance(data, dict) else []
    if old:
        new = {k: renamed[k] if renamed[k].startswith("`") else f"{section}.{renamed[k]}" for k in old}
        raise ValueError("renamed settings: " + "; ".join(f"{section}.{k} is now {new[k]}" for k in old))
    return data


class StageConfig(BaseModel):
    """A frozen, strict pydantic model; the same class is the CLI's options, the Prefect form and the code's type."""

    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())
    SECTION: ClassVar[str] = ""  # the dotted name users write, for the rename errors
    RENAMED: ClassVar[dict[str, str]] = {}  # old key -> its new name (a new name in backticks is not a setting)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return refuse_renamed(cls.SECTION, data, cls.RENAMED) if cls.RENAMED else data

    @model_validator(mode="before")
    @classmethod
    def _nested_defaults(cls, data: Any) -> Any:
        """A nested section given in part keeps this section's own defaults for the rest (``evaluate.sampling`` given
        a temperature keeps evaluation's token budget, not the ``Sampling`` class's)."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, field in cls.model_fields.items():
            key = field.alias or name
            if isinstance(out.get(key), dict) and field.default_factory is not None:
                default = field.default_factory()
                if isinstance(default, BaseModel) and not isinstance(default, RootModel):
                    out[key] = merged(default.model_dump(by_alias=True), out[key])
        return out
