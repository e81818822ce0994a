"""What a configuration error should say besides "not permitted": the field the user probably meant.

``--set ppo.step=10`` fails validation with ``ppo.step: Extra inputs are not permitted``; :func:`did_you_mean`
walks the config models along the error's location and offers the closest field name at that level
(``ppo.steps``), the way git offers a command.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Sequence

from pydantic import BaseModel


def _keys(model: type[BaseModel]) -> dict[str, type[BaseModel] | None]:
    """Field names as YAML spells them (aliases) -> the model a nested section holds (None for a plain value)."""
    out: dict[str, type[BaseModel] | None] = {}
    for name, field in model.model_fields.items():
        nested = [a for a in (field.annotation, *typing.get_args(field.annotation)) if _is_model(a)]
        out[field.alias or name] = nested[0] if nested else None
    return out


def _is_model(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def did_you_mean(model: type[BaseModel], loc: Sequence[str | int]) -> str | None:
    """The dotted name closest to the unknown key at ``loc`` (``("ppo", "step")`` -> ``"ppo.steps"``), or None."""
    node: type[BaseModel] | None = model
    for key in loc[:-1]:
        node = _keys(node).get(str(key)) if node is not None else None
    if node is None or not loc:
        return None
    close = difflib.get_close_matches(str(loc[-1]), list(_keys(node)), n=1, cutoff=0.6)
    return ".".join([*(str(k) for k in loc[:-1]), close[0]]) if close else None
