"""Base class for every stage config: frozen, no unknown keys, every field documented once."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


def recipe_path(*keywords: str) -> dict:
    """``json_schema_extra`` of a field naming an input file or folder: a relative path written in a recipe file is
    resolved against the recipe's folder (``config.load_config``); ``keywords`` are values that are not paths."""
    return {"recipe_path": list(keywords)}


class StageConfig(BaseModel):
    """A frozen, strict pydantic model; the same class is the CLI's options, the Prefect form and the code's type."""

    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())
