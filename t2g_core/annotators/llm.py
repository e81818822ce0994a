"""LLM annotator: critique + quoted spans from any OpenAI-compatible endpoint, concurrent, cached, fault tolerant.

Structured output and its fallbacks, retries, pacing, the answer cache and the item statuses: docs/annotation.md,
"LLM annotator". The API key is only handed to the client; it is never logged, stored or put into an error message.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from t2g_core.annotators.cache import AnswerCache, cache_key
from t2g_core.annotators.endpoint_checks import Pacing, SchemaCheck, with_json_instruction
from t2g_core.annotators.failures import connection_failure, short_text, status_error_text
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


Item = tuple[int, dict[str, Any], str]  # (position in the run, row with its rendered messages, cache key)
_REFUSAL_TEXT = re.compile(r"^\s*(I'?m sorry|I am sorry|I can(?:no|')t|I won'?t|I'm unable|I am unable)\b", re.I)
NO_KEY = "not-needed"  # local servers (vLLM, Ollama, the test server) accept any key; never read from the environment


@dataclass
class RunStats:
    """Counts of one annotation run (updated from the event loop's thread only); ``requests``: items sent to the
    endpoint (cache hits excluded; the client's retries of one item count once)."""

    requests: int = 0
    cache_hits: int = 0
    cost: float = 0.0  # of the live requests of this run
    structured_output: bool | str | None = None  # True, False (rejected or off) or "ignored" (answered prose)
    formats: Counter[str] = field(default_factory=Counter)  # how the answers used were asked, cached ones included
    notes: list[str] = field(default_factory=list)  # what the annotator found out about the endpoint, one line each

    def add_live(self, answer: dict[str, Any], cfg: AnnotateConfig) -> None:
        self.requests += 1
        if "prompt_tokens" in answer:  # failed requests have no usage to pay for (a too-long answer does)
            self.cost += item_cost(answer.get("prompt_tokens", 0), answer.get("completion_tokens", 0), cfg)


def item_cost(prompt_tokens: int, completion_tokens: int, cfg: AnnotateConfig) -> float:
    return (prompt_tokens * cfg.price_per_1k[0] + completion_tokens * cfg.price_per_1k[1]) / 1000


def answer_to_feedback(answer: dict[str, Any], max_tokens: int) -> ParsedFeedback:
    """Turn a stored answer (or a failure record) into a ParsedFeedback with a final status."""
    if answer.get("status") in ("api_error", "timeout"):
        return ParsedFeedback(None, status=answer["status"], error=answer.get("error"), raw=None)
    if answer.get("status") == "too_long":
        return ParsedFeedback(None, status="parse_error", error=answer["error"], raw=answer.get("content"))
    content, refusal, finish = answer.get("content"), answer.get("refusal"), answer.get("finish_reason")
    if refusal or finish == "content_filter":
        why = refusal or "content filter"
        return ParsedFeedback(None, status="refused", error=f"refused: {why}", raw=refusal or content)
    if finish == "length":
        why = f"answer truncated at max_tokens={max_tokens}"
        return ParsedFeedback(None, status="parse_error", error=why, raw=content)
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
        log: Callable[[str], None] | None = None,
    ):
        """``render`` turns a row into chat messages (default: the annotation prompt of ``cfg.mode`` and
        ``cfg.prompt_version``; the HTTP reward source sends the reward model's own prompt). ``log`` says what the
        annotator finds out about the endpoint, one line each (default: a warning on this module's logger)."""
        if cfg.annotator != "llm":
            raise ValueError(f"LLMAnnotator needs annotator='llm', got {cfg.annotator!r}")
        if not api_key and not is_local(cfg.base_url):
            raise MissingApiKey(
                f"annotate: no API key for {cfg.base_url} (set ${cfg.api_key_env} in the environment of the process "
                "that runs the stage); local endpoints need none"
            )
        self.cfg, self.cache = cfg, cache
        self._api_key = api_key or NO_KEY
        self._format = "plain" if cfg.structured_output == "off" else "json_schema"  # how requests are asked now
        self.schema_check, self.pacing = SchemaCheck(), Pacing(cfg.concurrency, cfg.timeout_s)
        self.stats = RunStats()
        self.log = log or logging.getLogger(__name__).warning
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

    async def _create(self, client: openai.AsyncOpenAI, messages: list[dict[str, str]]) -> tuple[ChatCompletion, str]:
        """The completion and how it was asked: json_schema, plain or prompted_json (``self._format``)."""
        body: dict[str, Any] = {"model": self.cfg.model, "messages": messages, **self.sampling}
        asked = self._format
        if asked == "json_schema":
            try:
                schema = {"type": "json_schema", "json_schema": SPAN_JSON_SCHEMA}
                return await self._post(client, {**body, "response_format": schema}), asked
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:  # 422: FastAPI's validation
                why = status_error_text(exc).lower() + str(getattr(exc, "param", ""))
                if self.cfg.structured_output == "json_schema" or "response_format" not in why:
                    raise
                self._format = asked = "plain"  # the endpoint does not do structured output: plain text from now on
        if asked == "prompted_json":
            body["messages"] = with_json_instruction(messages)
        return await self._post(client, body), asked

    async def _ask(self, client: openai.AsyncOpenAI, messages: list[dict[str, str]]) -> dict[str, Any]:
        """Send one request (client retries included); a failure record instead of an exception, whatever fails."""
        start = time.perf_counter()
        try:
            completion, asked = await self._create(client, messages)
        except openai.APIConnectionError as exc:  # timeouts are a kind of connection error in the SDK
            return self._failure(connection_failure(exc, self.cfg))
        except openai.APIStatusError as exc:
            return self._failure({"status": "api_error", "error": f"HTTP {exc.status_code}: {status_error_text(exc)}"})
        except Exception as exc:  # noqa: BLE001 - a cut body, a broken proxy: this item's failure, never the run's
            return self._failure({"status": "api_error", "error": f"{type(exc).__name__}: {short_text(str(exc))}"})
        answer = self._completion(completion, start)
        return answer if "status" in answer else {**answer, "format": asked}

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
            why = f"malformed completion from the endpoint: {type(exc).__name__}: {short_text(str(exc))}"
            return self._failure({"status": "api_error", "error": why})

    async def _answer(
        self, client: openai.AsyncOpenAI, row: dict[str, Any], key: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """One live request: its row and the answer (or failure record). A returned answer is committed to the cache
        before its row is built; under the same key as a prose answer it re-asks, which it replaces."""
        try:
            answer = await self._ask(client, row["_messages"])
        except Exception as exc:  # noqa: BLE001 - nothing one item does may stop the run
            answer = self._failure({"status": "api_error", "error": f"{type(exc).__name__}: {short_text(str(exc))}"})
        answer = _capped(answer, self.cfg.max_answer_chars)
        self.stats.add_live(answer, self.cfg)
        if "status" not in answer:
            if self.cache is not None:
                self.cache.put(key, answer)
            self._say(self.pacing.observe(float(answer.get("latency_s", 0.0)), time.perf_counter()))
        # parsed in a worker thread: a hostile answer's parse (up to about a second) holds up no other request
        return await asyncio.to_thread(self._row, row, answer, False), answer

    def _say(self, line: str | None) -> None:
        """One line about the endpoint, to the log and the run's statistics."""
        if line:
            self.stats.notes.append(line)
            self.log(line)

    def _note(self, item: Item, answer: Any, asked: dict[int, str], prose: list[Item]) -> None:
        """Record how ``item``'s answer was asked; one that carried the schema and is not JSON goes to ``prose``."""
        if not isinstance(answer, dict) or "format" not in answer:  # a failure, or cached before formats were kept
            return
        asked[item[0]] = answer["format"]
        if answer["format"] == "json_schema" and not answer.get("refusal"):
            if self.schema_check.observe(answer.get("content")):
                prose.append(item)

    def _check_schema(self, expected: int) -> None:
        """Once most answers to the schema were prose: say so, and (``structured_output=auto``) ask in the prompt."""
        if self.schema_check.decide(expected):
            fallback = self.cfg.structured_output == "auto"
            if fallback and self._format == "json_schema":
                self._format = "prompted_json"
            self._say(self.schema_check.message(fallback))

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
    def _lookup(
        self, rows: list[dict[str, Any]], refresh: set[str], out: list, asked: dict[int, str], prose: list[Item], bar
    ) -> list[Item]:
        """Build the rows of unaskable and already answered items (no request, no slot); the items to ask."""
        live: list[Item] = []
        for i, row in enumerate(rows):
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
                continue
            self.stats.cache_hits += 1
            out[i] = self._guarded_row(row, cached)
            self._note((i, row, key), cached, asked, prose)
            bar.update(1)
        return live

    async def _work(
        self, client: openai.AsyncOpenAI, items: list[Item], out: list, asked: dict[int, str], prose: list[Item], bar
    ) -> None:
        """Ask ``items`` with up to ``pacing.limit`` requests in flight (a slot whose number reaches a lowered limit
        stops after its current request)."""
        queue = iter(items)  # shared by the workers; next() never awaits, so each item goes to exactly one of them
        expected = len(self.schema_check.recent) + len(items)

        async def worker(slot: int) -> None:  # takes the next item as soon as its request is answered
            while slot < self.pacing.limit and (item := next(queue, None)) is not None:
                i, row, key = item
                try:
                    out[i], answer = await self._answer(client, row, key)
                    self._note(item, answer, asked, prose)
                    self._check_schema(expected)
                except Exception as exc:  # noqa: BLE001 - caching or building its row failed: this item's status
                    out[i] = self._item_failure(row, "api_error", f"{type(exc).__name__}: {short_text(str(exc))}")
                if bar is not None:
                    bar.update(1)

        await asyncio.gather(*(worker(slot) for slot in range(min(self.pacing.limit, len(items)))))

    async def annotate_async(
        self, rows: list[dict[str, Any]], refresh_ids: Iterable[str] = (), progress: bool = True
    ) -> list[dict[str, Any]]:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(rows), desc=f"annotate ({self.name})", unit="item", disable=not progress)
        out: list[dict[str, Any] | None] = [None] * len(rows)
        asked: dict[int, str] = {}  # how each item's answer was asked (json_schema, plain, prompted_json)
        prose: list[Item] = []  # items whose answer to the schema was not JSON: re-asked if the schema was ignored
        live = self._lookup(rows, set(refresh_ids), out, asked, prose, bar)
        client = openai.AsyncOpenAI(
            base_url=self.cfg.base_url,
            api_key=self._api_key,
            max_retries=self.cfg.max_retries,
            timeout=self.cfg.timeout_s,
            http_client=openai.DefaultAioHttpClient() if self.cfg.http_backend == "aiohttp" else None,
        )
        gc.freeze()  # a full collection over everything already in memory stalls every request in flight (~0.1 s)
        try:
            await self._work(client, live, out, asked, prose, bar)
            self._check_schema(0)  # a run with fewer answers than the check's window decides on what it got
            if prose and self._format == "prompted_json":
                await self._work(client, prose, out, asked, [], None)
        finally:
            gc.unfreeze()
            bar.close()
            await client.close()
        self.stats.formats = Counter(asked.values())
        ignored = self.schema_check.ignored or "prompted_json" in self.stats.formats
        self.stats.structured_output = "ignored" if ignored else self._format == "json_schema"
        return [r for r in out if r is not None]

    def annotate(
        self, rows: list[dict[str, Any]], refresh_ids: Iterable[str] = (), progress: bool = True
    ) -> list[dict[str, Any]]:
        """Synchronous entry point, with or without a running event loop. Every prompt is rendered before the first
        request (a missing prompt file fails before any spend); an item that cannot be asked is its own
        ``parse_error``."""
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
        "missing": list(parsed.missing),
        "missing_at": missing_anchors(parsed),
    }


def missing_anchors(parsed: ParsedFeedback) -> list[int | None]:
    """Where each missing item belonged (a char offset, None = unknown), one per item of ``parsed.missing``."""
    at = list(parsed.missing_at)[: len(parsed.missing)]
    return at + [None] * (len(parsed.missing) - len(at))
