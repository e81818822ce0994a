"""What went wrong with a request, in the server's own words: HTTP error bodies of every shape, connection failures
told apart from timeouts, and text shortened for an item's ``error``."""

from __future__ import annotations

import json
from typing import Any

import openai

from t2g_core.config.annotate import AnnotateConfig


def status_error_text(exc: openai.APIStatusError) -> str:
    """The server's own words for an HTTP error, shortened. The SDK's message is only "Error code: 400" unless the
    body is OpenAI-shaped (``{"error": {"message"}}``); FastAPI servers (``transformers serve``, many proxies) send
    ``{"detail": "..."}`` or, for a rejected field, ``{"detail": [{"loc", "msg"}]}``, and others plain text."""
    body = exc.body
    if isinstance(body, dict):
        found = next((body[k] for k in ("message", "detail", "error", "msg") if body.get(k)), None)
        body = found if found is not None else body
    if isinstance(body, list):  # FastAPI validation errors
        body = "; ".join(_validation_text(e) for e in body)
    if isinstance(body, dict):
        body = body.get("message") or json.dumps(body, ensure_ascii=False)
    text = body if isinstance(body, str) and body.strip() else getattr(exc.response, "text", "") or exc.message
    return short_text(text)


def _validation_text(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    where = ".".join(str(part) for part in error.get("loc") or ())
    return f"{where}: {error.get('msg', '')}" if where else str(error.get("msg", error))


def connection_failure(exc: Exception, cfg: AnnotateConfig) -> dict[str, Any]:
    """A timeout, or what really went wrong: a refused or broken connection (some transports report those as
    timeouts; the underlying OSError in the exception chain says which)."""
    cause, seen = exc.__cause__ or exc.__context__, 0
    while cause is not None and seen < 10:
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            return {
                "status": "api_error",
                "error": f"connection failed ({cfg.base_url}): {type(cause).__name__}: {short_text(str(cause))}",
            }
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    if isinstance(exc, openai.APITimeoutError):
        return {
            "status": "timeout",
            "error": f"no answer within {cfg.timeout_s:g} s ({cfg.max_retries} retries); a server that answers one "
            "request at a time queues the others: lower annotate.concurrency or raise annotate.timeout_s",
        }
    return {"status": "api_error", "error": f"connection failed ({cfg.base_url}): {short_text(str(exc))}"}


def short_text(text: str, n: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."
