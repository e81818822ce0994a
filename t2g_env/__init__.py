"""The API key a stage sends to an outside service, read from the process environment: the one place that reads it.

``t2g_core`` reads no environment variables; a stage's settings say which variable holds its key
(``settings.api_key_env``: the LLM annotator's, the HTTP reward source's, the pairwise judge's; None when the
stage calls no service). The Prefect tasks and the command line both call :func:`api_key` and hand the key to the
stage function, which never logs or stores it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from t2g_core.config.stages import StageSettings


def api_key(settings: StageSettings) -> str | None:
    """The value of the variable ``settings.api_key_env`` names (None when it names none or the variable is unset)."""
    name = settings.api_key_env
    return os.environ.get(name) if name else None


def stage_call(fn, inputs: dict, ctx):
    """``fn(**inputs, ctx=ctx)``, with the API key its settings name when ``fn`` takes one (read here, never stored)."""
    import inspect

    key = {"api_key": api_key(inputs["settings"])} if "api_key" in inspect.signature(fn).parameters else {}
    return fn(**inputs, ctx=ctx, **key)
