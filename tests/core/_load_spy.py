"""A spy on ``load_causal_lm``: which function of which stage loaded a model, in which dtype."""

from __future__ import annotations

import sys

import torch

import t2g_core.reward_model.tagger  # noqa: F401  (imports the name at its top: loaded before install() looks)
from t2g_core.models.loading import load_causal_lm


class _Loads:
    """A spy on ``load_causal_lm``: who loaded which model, with which dtype argument, and in what it came out."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, set[torch.dtype]]] = []

    def __call__(self, ref, **kwargs):
        frame = sys._getframe(1)
        model = load_causal_lm(ref, **kwargs)
        loaded = {p.dtype for p in model.parameters() if p.is_floating_point()}
        self.calls.append((f"{frame.f_globals['__name__']}.{frame.f_code.co_name}", kwargs.get("dtype"), loaded))
        return model

    def install(self, monkeypatch) -> _Loads:
        """Stand in for ``load_causal_lm`` in every loaded module that holds it, however the module imported it."""
        for module in list(sys.modules.values()):
            if (
                module is not sys.modules[__name__]
                and getattr(module, "__dict__", {}).get("load_causal_lm") is load_causal_lm
            ):
                monkeypatch.setattr(module, "load_causal_lm", self)
        return self

    def callers(self) -> set[str]:
        return {caller for caller, _, _ in self.calls}
