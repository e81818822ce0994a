"""Base class for every stage config: frozen, no unknown keys, every field documented once."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StageConfig(BaseModel):
    """A frozen, strict pydantic model; the same class is the CLI's options, the Prefect form and the code's type."""

    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())
