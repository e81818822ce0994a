"""LLM annotator: critique + quoted spans from any OpenAI-compatible endpoint, concurrent, cached, fault tolerant.

- Concurrency: ``cfg.concurrency`` worker coroutines share one ``AsyncOpenAI`` client, over the SDK's aiohttp
transport by
  default (``http_backend``): at 32 requests in flight the client's CPU per request, not the network, sets the pace.
  An answer is committed to the cache (one SQLite append, ~20 us) before its row is built.
- Retries: the ``openai`` client's own machinery (``max_retries``): it retries 408/409/429/5xx, connection errors
  and timeouts with exponential backoff (0.5 s doubling, capped at 8 s) and 0-25 % jitter, and waits exactly the
  server's ``Retry-After`` / ``retry-after-ms`` when given (up to 120 s). ``timeout`` is per request.
- Structured output: ``response_format={"type": "json_schema", ...}`` unless the endpoint rejects it (HTTP 400
  naming ``response_format``), after which the run falls back to plain text parsed by ``spans.parse_span_json``.
- Every answer that comes back is written to the :class:`AnswerCache` at once; failures are never cached.
- Every item ends with a status: ok, parse_error (unparseable, truncated or not valid Unicode; or an item that
  cannot be asked, such as a grounding item without a human critique), api_error, timeout, refused. Whatever one
  item raises becomes its status: nothing one item or its answer does stops the run.
The API key is only handed to the client; it is never logged, stored or put into an error message.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from t2g_core.annotators.cache import AnswerCache, cache_key
from t2g_core.annotators.prompts import SPAN_JSON_SCHEMA, NotAskable, render_messages
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.spans import ParsedFeedback, parse_span_json, valid_text

_SECRET = re.compile(r"(sk-[A-Za-z0-9_\-]{8,}|Bearer\s+\S+|(?i:api[_-]?key)[\"']?\s*[:=]\s*[\"']?[^\s\"',}]{6,})")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0")  # noqa: S104 - compared with, never bound


class MissingApiKey(ValueError):
    """A remote endpoint and no API key: every request would be refused."""


def redact(text: str | None, key: str | None = None) -> str | None:
    """``text`` without the API key or anything shaped like a key or a bearer token (an endpoint may echo them)."""
    if not text:
        return text
    if key and key != NO_KEY:
        text = text.replace(key, "[redacted]")
    return _SECRET.sub("[redacted]", text)


def is_local(base_url: str | None) -> bool:
    from urllib.parse import urlparse

    return (urlparse(base_url or "").hostname or "") in LOCAL_HOSTS


_REFUSAL_TEXT = re.compile(r"^\s*(I'?m sorry|I am sorry|I can(?:no|')t|I won'?t|I'm unable|I am unable)\b", re.I)
NO_KEY = "not-needed"  # local servers (vLLM, Ollama, the test server) accept any key; never read from the environment


@dataclass
class RunStats:
    """Counts of one annotation run (updated from the event loop's thread only); ``requests``: items sent to the
    endpoint (cache hits excluded; the client's retries of one item count once)."""

    requests: int = 0
    cache_hits: int = 0
    cost: float = 0.0  # of the live requests of this run
    structured_output: bool | None = None

    def add_live(self, answer: dict[str, Any], cfg: AnnotateConfig) -> None:
        self.requests += 1
        if "prompt_tokens" in answer:  # failed requests have no usage to pay for (a too-long answer does)
            self.cost += item_cost(answer.get("prompt_tokens", 0), answer.get("completion_tokens", 0), cfg)


def item_cost(prompt_tokens: int, completion_tokens: int, cfg: AnnotateConfig) -> float:
    return prompt_tokens / 1000 * cfg.price_per_1k_prompt + completion_tokens / 1000 * cfg.price_per_1k_completion


def answer_to_feedback(answer: dict[str, Any], max_tokens: int) -> ParsedFeedback:
    """Turn a stored answer (or a failure record) into a ParsedFeedback with a final status."""
    if answer.get("status") in ("api_error", "timeout"):
        return ParsedFeedback(None, status=answer["status"], error=answer.get("error"), raw=None)
    if answer.get("status") == "too_long":
        return ParsedFeedback(None, status="parse_error", error=answer["error"], raw=answer.get("content"))
    content, refusal = answer.get("content"), answer.get("refusal")
    if refusal or answer.get("finish_reason") == "content_filter":
        return ParsedFeedback(
            None, status="refused", error=f"refused: {refusal or 'content filter'}", raw=refusal or content
        )
    if answer.get("finish_reason") == "length":
        return ParsedFeedback(
            None, status="parse_error", error=f"answer truncated at max_tokens={max_tokens}", raw=content
        )
    parsed = parse_span_json(content)
    if not parsed.ok and content and _REFUSAL_TEXT.match(content):
        return ParsedFeedback(None, status="refused", error="refused in text", raw=content)
    return parsed


class LLMAnnotator:
    """Annotates feedback rows through an OpenAI-compatible chat-completions endpoint."""

    def __init__(
        self,
        cfg: AnnotateConfig,
        *,
        api_key: str | None = None,
        cache: AnswerCache | None = None,
        render: Callable[[dict[str, Any]], list[dict[str, str]]] | None = None,
    ):
        """``render`` turns a row into chat messages (default: the annotation prompt of ``cfg.mode`` and
        ``cfg.prompt_version``; the HTTP reward source sends the reward model's own prompt)."""
        if cfg.annotator != "llm":
            raise ValueError(f"LLMAnnotator needs annotator='llm', got {cfg.annotator!r}")
        if not api_key and not is_local(cfg.base_url):
            raise MissingApiKey(
                f"annotate: no API key for {cfg.base_url} (set ${cfg.api_key_env} in the environment of the process "
                "that runs the stage); local endpoints need none"
            )
        self.cfg, self.cache = cfg, cache
        self._api_key = api_key or NO_KEY
        self._structured = cfg.structured_output != "off"
        self.stats = RunStats()
        self.render = render or (lambda row: render_messages(row, cfg.mode, cfg.prompt_version))

    @property
    def name(self) -> str:
        return f"llm:{self.cfg.model}"

    @property
    def sampling(self) -> dict[str, Any]:
        return {"temperature": self.cfg.temperature, "max_tokens": self.cfg.max_tokens, "top_p": self.cfg.top_p}

    # -- one request -----------------------------------------------------------------------------------------
    async def _post(self, client: openai.AsyncOpenAI, body: dict[str, Any]) -> ChatCompletion:
        # client.post is the SDK's documented route for raw bodies: same retries, errors and typed parsing as
        # chat.completions.create, without its recursive TypedDict transform (~half the client CPU per request).
        return await client.post(
            "/chat/completions", cast_to=ChatCompletion, body=body, options={"timeout": self.cfg.timeout_s}
        )

    async def _create(self, client: openai.AsyncOpenAI, messages: list[dict[str, str]]) -> ChatCompletion:
        body: dict[str, Any] = {"model": self.cfg.model, "messages": messages, **self.sampling}
        if self._structured:
            try:
                return await self._post(
                    client, {**body, "response_format": {"type": "json_schema", "json_schema": SPAN_JSON_SCHEMA}}
                )
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:  # 422: FastAPI's validation
                if self.cfg.structured_output == "json_schema" or "response_format" not in status_error_text(
                    exc
                ).lower() + str(getattr(exc, "param", "")):
                    raise
                self._structured = False  # the endpoint does not do structured output: plain text from now on
        return await self._post(client, body)

    async def _ask(self, client: openai.AsyncOpenAI, messages: list[dict[str, str]]) -> dict[str, Any]:
        """Send one request (client retries included); a failure record instead of an exception, whatever fails."""
        start = time.perf_counter()
        try:
            completion = await self._create(client, messages)
        except openai.APIConnectionError as exc:  # timeouts are a kind of connection error in the SDK
            return self._failure(_connection_failure(exc, self.cfg))
        except openai.APIStatusError as exc:
            return self._failure({"status": "api_error", "error": f"HTTP {exc.status_code}: {status_error_text(exc)}"})
        except Exception as exc:  # noqa: BLE001 - a cut body, a broken proxy: this item's failure, never the run's
            return self._failure({"status": "api_error", "error": f"{type(exc).__name__}: {_short(str(exc))}"})
        return self._completion(completion, start)

    def _failure(self, record: dict[str, Any]) -> dict[str, Any]:
        return {**record, "error": redact(record.get("error"), self._api_key)}

    def _completion(self, completion: ChatCompletion, start: float) -> dict[str, Any]:
        try:
            choice, usage = completion.choices[0], completion.usage
            return {
                "content": choice.message.content,
                "refusal": getattr(choice.message, "refusal", None),
                "finish_reason": choice.finish_reason,
                "prompt_tokens": int(usage.prompt_tokens) if usage else 0,
                "completion_tokens": int(usage.completion_tokens) if usage else 0,
                "latency_s": time.perf_counter() - start,
                "model": completion.model,
            }
        except (AttributeError, IndexError, TypeError, ValueError) as exc:  # HTTP 200 but not a chat completion
            return self._failure(
                {
                    "status": "api_error",
                    "error": f"malformed completion from the endpoint: {type(exc).__name__}: {_short(str(exc))}",
                }
            )

    async def _answer(self, client: openai.AsyncOpenAI, row: dict[str, Any], key: str) -> dict[str, Any]:
        """One live request; a returned answer is committed to the cache before its row is built."""
        try:
            answer = await self._ask(client, row["_messages"])
        except Exception as exc:  # noqa: BLE001 - nothing one item does may stop the run
            answer = self._failure({"status": "api_error", "error": f"{type(exc).__name__}: {_short(str(exc))}"})
        answer = _capped(answer, self.cfg.max_answer_chars)
        self.stats.add_live(answer, self.cfg)
        if "status" not in answer and self.cache is not None:
            self.cache.put(key, answer)
        return self._row(row, answer, cached=False)

    def _item_failure(self, row: dict[str, Any], status: str, error: str) -> dict[str, Any]:
        return feedback_row(
            row["id"], self.name, ParsedFeedback(None, status=status, error=redact(error, self._api_key))
        )

    def _guarded_row(self, row: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        """The row of a cached answer; one whose row cannot be built is this item's parse_error."""
        try:
            return self._row(row, answer, cached=True)
        except Exception as exc:  # noqa: BLE001 - a stored answer of an unexpected shape: this item's failure
            return self._item_failure(row, "parse_error", f"cached answer unusable: {type(exc).__name__}: {exc}")

    def _row(self, row: dict[str, Any], answer: dict[str, Any], cached: bool) -> dict[str, Any]:
        parsed = answer_to_feedback(answer, self.cfg.max_tokens)
        parsed = replace(parsed, error=redact(parsed.error, self._api_key), raw=redact(parsed.raw, self._api_key))
        pt, ct = int(answer.get("prompt_tokens", 0)), int(answer.get("completion_tokens", 0))
        return feedback_row(
            row["id"], self.name, parsed, pt, ct, 0.0 if cached else float(answer.get("latency_s", 0.0))
        )

    # -- many requests ---------------------------------------------------------------------------------------
    async def annotate_async(
        self, rows: list[dict[str, Any]], refresh_ids: Iterable[str] = (), progress: bool = True
    ) -> list[dict[str, Any]]:
        from tqdm.auto import tqdm

        refresh = set(refresh_ids)
        bar = tqdm(total=len(rows), desc=f"annotate ({self.name})", unit="item", disable=not progress)
        out: list[dict[str, Any] | None] = [None] * len(rows)
        live: list[tuple[int, dict[str, Any], str]] = []
        for i, row in enumerate(rows):  # unaskable and answered items first: no request, no slot
            try:
                row = dict(row, _messages=self.render(row))
            except NotAskable as exc:
                out[i] = self._item_failure(row, "parse_error", f"not sent: {exc}")
                bar.update(1)
                continue
            key = cache_key(self.cfg.model, self.cfg.prompt_version, row["_messages"], self.sampling)
            cached = None if (row["id"] in refresh or self.cache is None) else self.cache.get(key)
            if cached is None:
                live.append((i, row, key))
            else:
                self.stats.cache_hits += 1
                out[i] = self._guarded_row(row, cached)
                bar.update(1)
        client = openai.AsyncOpenAI(
            base_url=self.cfg.base_url,
            api_key=self._api_key,
            max_retries=self.cfg.max_retries,
            timeout=self.cfg.timeout_s,
            http_client=openai.DefaultAioHttpClient() if self.cfg.http_backend == "aiohttp" else None,
        )
        queue = iter(live)  # shared by the workers; next() never awaits, so each item goes to exactly one of them

        async def worker() -> None:  # a slot that takes the next item as soon as its request is answered
            for i, row, key in queue:
                try:
                    out[i] = await self._answer(client, row, key)
                except Exception as exc:  # noqa: BLE001 - caching or building its row failed: this item's status
                    out[i] = self._item_failure(row, "api_error", f"{type(exc).__name__}: {_short(str(exc))}")
                bar.update(1)

        gc.freeze()  # a full collection over everything already in memory stalls every request in flight (~0.1 s)
        try:
            await asyncio.gather(*(worker() for _ in range(min(self.cfg.concurrency, len(live)))))
        finally:
            gc.unfreeze()
            bar.close()
            await client.close()
        self.stats.structured_output = self._structured
        return [r for r in out if r is not None]

    def annotate(
        self, rows: list[dict[str, Any]], refresh_ids: Iterable[str] = (), progress: bool = True
    ) -> list[dict[str, Any]]:
        """Synchronous entry point; works whether or not an event loop is already running in this thread.

        Every prompt is rendered before the first request, so a missing prompt file fails at once instead of after
        part of the spend; an item that cannot be asked (a grounding item without a human critique) is its own
        ``parse_error``, sent nowhere.
        """
        coro = self.annotate_async(rows, refresh_ids, progress)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro)
        result: list[list[dict[str, Any]]] = []
        thread = threading.Thread(target=lambda: result.append(asyncio.run(coro)))
        thread.start()
        thread.join()
        return result[0]


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
    return _short(text)


def _validation_text(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    where = ".".join(str(part) for part in error.get("loc") or ())
    return f"{where}: {error.get('msg', '')}" if where else str(error.get("msg", error))


def _connection_failure(exc: Exception, cfg: AnnotateConfig) -> dict[str, Any]:
    """A timeout, or what really went wrong: a refused or broken connection (some transports report those as
    timeouts; the underlying OSError in the exception chain says which)."""
    cause, seen = exc.__cause__ or exc.__context__, 0
    while cause is not None and seen < 10:
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            return {
                "status": "api_error",
                "error": f"connection failed ({cfg.base_url}): {type(cause).__name__}: {_short(str(cause))}",
            }
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    if isinstance(exc, openai.APITimeoutError):
        return {
            "status": "timeout",
            "error": f"no answer within {cfg.timeout_s:g} s ({cfg.max_retries} retries); a server that answers one "
            "request at a time queues the others: lower annotate.concurrency or raise annotate.timeout_s",
        }
    return {"status": "api_error", "error": f"connection failed ({cfg.base_url}): {_short(str(exc))}"}


def _capped(answer: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """An answer longer than ``max_chars`` becomes a parse_error (never cached; its raw text is cut)."""
    content = answer.get("content")
    if "status" in answer or not isinstance(content, str) or len(content) <= max_chars:
        return answer
    usage = {k: answer[k] for k in ("prompt_tokens", "completion_tokens", "latency_s") if k in answer}
    return {
        **usage,
        "status": "too_long",
        "error": f"the answer has {len(content)} characters, more than annotate.max_answer_chars ({max_chars})",
        "content": content[:1000],
    }


def _short(text: str, n: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def feedback_row(
    item_id: str,
    annotator: str,
    parsed: ParsedFeedback,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    latency_s: float = 0.0,
) -> dict[str, Any]:
    """One row of the annotations schema (text that is not valid Unicode replaced: see ``spans.valid_text``)."""
    parsed = valid_text(parsed)
    return {
        "id": item_id,
        "annotator": annotator,
        "critique": parsed.critique,
        "good_spans": list(parsed.good_spans),
        "poor_spans": list(parsed.poor_spans),
        "reasoning": parsed.reasoning,
        "status": parsed.status,
        "error": parsed.error,
        "raw": parsed.raw,
        "prompt_tokens": int(prompt_tokens),
        "completion_tokens": int(completion_tokens),
        "latency_s": float(latency_s),
    }
