"""A local OpenAI-compatible chat-completions server with scripted answers and fault injection.

Real HTTP on 127.0.0.1 (stdlib ``ThreadingHTTPServer``), so tests and benchmarks exercise the real ``openai``
client: its retries, timeouts and parsing. ``answer(request_json) -> str | Reply`` scripts the content; the faults
(``FAULTS``, ``HOSTILE``) and the options for servers unlike OpenAI's: docs/annotation.md, "The local test endpoint".
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import select
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROSE = "Thanks for sharing! The summary reads well overall, though the ending could be a little tighter."
FAULTS = ("rate_limit", "server_error", "slow", "malformed", "truncated", "refusal", "bad_body")
HOSTILE = ("cut_body", "huge", "echo_key", "hang_up")


@dataclass
class Reply:
    """A scripted answer. ``status`` != 200 sends an error body; ``refusal`` sends a refusal message."""

    content: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    refusal: str | None = None
    finish_reason: str = "stop"
    body: dict[str, Any] | None = None  # sent as-is instead of a chat completion (or of the error body)


def quoting_answer(request: dict[str, Any]) -> str:
    """Default script: a valid span JSON that quotes words of the ``<response>...</response>`` block of the prompt."""
    text = "\n".join(str(m.get("content", "")) for m in request.get("messages", []))
    found = re.search(r"<response>\n?(.*?)\n?</response>", text, re.S)
    words = (found.group(1) if found else "").split()
    good = [" ".join(words[:3])] if len(words) >= 3 else []
    poor = [" ".join(words[-2:])] if len(words) >= 6 else []
    reasoning, critique = "Step 1: read the response. Step 2: compare.", "Mostly fine; the ending is weak."
    return json.dumps({"reasoning": reasoning, "critique": critique, "good_spans": good, "poor_spans": poor})


class FakeOpenAIServer:
    """OpenAI-compatible ``POST /v1/chat/completions`` on 127.0.0.1 with fault injection. Thread-safe counters."""

    def __init__(
        self,
        answer: Callable[[dict[str, Any]], str | Reply] = quoting_answer,
        *,
        latency_s: float = 0.0,
        fault_rate: float = 0.0,
        faults: tuple[str, ...] = FAULTS,
        seed: int = 0,
        retry_after: str = "0.05",
        slow_s: float = 2.0,
        json_schema: bool = True,
        huge_bytes: int = 40 << 20,
        error_style: str = "openai",
        serial: bool = False,
        ignore_response_format: bool = False,
    ):
        unknown = set(faults) - set(FAULTS) - set(HOSTILE)
        if unknown:
            raise ValueError(f"unknown fault(s) {sorted(unknown)}; choose from {FAULTS + HOSTILE}")
        if error_style not in ("openai", "fastapi"):
            raise ValueError(f"unknown error_style {error_style!r}; choose openai or fastapi")
        self.huge_bytes, self.error_style = huge_bytes, error_style
        self.ignore_response_format = ignore_response_format
        self.serial = _Queue() if serial else None  # held while one request is being answered
        self.answered_after_gone = 0  # serial: answers worked out for clients that had already given up
        self.answer, self.latency_s, self.fault_rate, self.faults = answer, latency_s, fault_rate, tuple(faults)
        self.seed, self.retry_after, self.slow_s, self.json_schema = seed, retry_after, slow_s, json_schema
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # every parsed request body, in arrival order
        self.outcomes: Counter[str] = Counter()  # "ok" or the fault injected
        self.auth_headers: list[str] = []
        self._attempts: Counter[str] = Counter()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def n_requests(self) -> int:
        with self.lock:
            return len(self.requests)

    # -- behaviour -----------------------------------------------------------------------------------------
    def draw_fault(self, body: bytes) -> str | None:
        """The fault for this request (or None): deterministic in (seed, body, attempt number of this body)."""
        digest = hashlib.sha256(body).hexdigest()
        with self.lock:
            attempt = self._attempts[digest]
            self._attempts[digest] += 1
        rng = random.Random(f"{self.seed}:{digest}:{attempt}")
        persistent = random.Random(f"{self.seed}:{digest}")  # hostile faults do not go away on a retry
        hostile = [f for f in self.faults if f in HOSTILE]
        if hostile and persistent.random() < self.fault_rate:
            return persistent.choice(hostile)
        if not self.faults or rng.random() >= self.fault_rate:
            return None
        return rng.choice(self.faults)

    def reply_for(self, request: dict[str, Any], fault: str | None) -> Reply:
        if fault == "rate_limit":
            return Reply(status=429, content="rate limited", headers={"Retry-After": self.retry_after})
        if fault == "server_error":
            return Reply(status=500, content="internal error")
        if fault == "refusal":
            return Reply(refusal="I'm sorry, I can't help with that.")
        if fault == "bad_body":
            return Reply(body={"object": "error", "detail": "upstream proxy hiccup"})
        if fault == "echo_key":
            return Reply(status=401, content=f"invalid key: {request.get('_authorization', '')}")
        scripted = self.answer(request)
        reply = scripted if isinstance(scripted, Reply) else Reply(content=scripted)
        if self.ignore_response_format and reply.status == 200 and not _spells_out_json(request):
            reply.content = PROSE
        if fault == "slow":
            reply.delay_s = max(reply.delay_s, self.slow_s)
        elif fault == "malformed":
            reply.content = "Sure! Here is my critique: the response is good, spans are 'the' and 'a'."
        elif fault == "truncated" and reply.content:
            reply.content, reply.finish_reason = reply.content[: len(reply.content) // 2], "length"
        elif fault == "huge":
            reply.content = "x" * self.huge_bytes
        return reply


def _spells_out_json(request: dict[str, Any]) -> bool:
    from t2g_core.annotators.endpoint_checks import JSON_INSTRUCTION

    messages = request.get("messages") or [{}]
    return JSON_INSTRUCTION in str(messages[-1].get("content", ""))


class _Queue:
    """A lock granted in arrival order (``threading.Lock`` lets a newcomer overtake the threads already waiting)."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._next_ticket = self._serving = 0

    def __enter__(self) -> None:
        with self._turn:
            ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
            self._turn.wait_for(lambda: self._serving == ticket)

    def __exit__(self, *exc: object) -> None:
        with self._turn:
            self._serving += 1
            self._turn.notify_all()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # listen backlog: the default 5 drops connections when many clients connect at once


def _completion_body(request: dict[str, Any], reply: Reply) -> dict[str, Any]:
    prompt_chars = sum(len(str(m.get("content", ""))) for m in request.get("messages", []))
    completion_chars = len(reply.content or reply.refusal or "")
    return {
        "id": f"chatcmpl-{hashlib.sha1(json.dumps(request, sort_keys=True).encode()).hexdigest()[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content, "refusal": reply.refusal},
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": max(1, prompt_chars // 4),
            "completion_tokens": max(1, completion_chars // 4),
            "total_tokens": max(1, prompt_chars // 4) + max(1, completion_chars // 4),
        },
    }


class _Handler(BaseHTTPRequestHandler):
    """The endpoint: ``self.server.fake`` is the FakeOpenAIServer it serves."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: Nagle + delayed ACK would add ~40 ms

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None, param: str | None = None):
        """An error in the server's style: OpenAI's ``{"error": {...}}`` or FastAPI's ``{"detail": ...}``."""
        if self.server.fake.error_style == "fastapi":
            self._send(status, {"detail": message}, headers)
        else:
            self._send(status, {"error": {"message": message, **({"param": param} if param else {})}}, headers)

    def _send(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None, cut: bool = False
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if cut:  # half the body, then the connection closes
            data = data[: len(data) // 2]
            self.close_connection = True
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            request = json.loads(body)
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "body is not JSON"}})
            return
        fault = self.server.fake.draw_fault(body)
        with self.server.fake.lock:
            self.server.fake.requests.append(request)
            self.server.fake.outcomes[fault or "ok"] += 1
            self.server.fake.auth_headers.append(self.headers.get("Authorization", ""))
        rf = request.get("response_format") or {}
        if rf.get("type") == "json_schema" and not self.server.fake.json_schema:
            self._error(400, "response_format json_schema is not supported", param="response_format")
            return
        if fault == "hang_up":
            self.close_connection = True
            return
        if self.server.fake.serial is None:
            self._answer(request, fault)
            return
        with self.server.fake.serial:  # one at a time: the others wait here, as in a single-worker server's queue
            self._answer(request, fault)
            if self._client_gone():
                with self.server.fake.lock:
                    self.server.fake.answered_after_gone += 1

    def _client_gone(self) -> bool:
        """The client closed its end (it timed out and gave up): its socket reads as end-of-file."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _answer(self, request: dict[str, Any], fault: str | None) -> None:
        reply = self.server.fake.reply_for({**request, "_authorization": self.headers.get("Authorization", "")}, fault)
        time.sleep(self.server.fake.latency_s + reply.delay_s)
        if reply.status != 200 and reply.body is not None:  # an error body given as-is
            self._send(reply.status, reply.body, reply.headers)
            return
        if reply.status != 200:
            self._error(reply.status, reply.content or "error", reply.headers)
            return
        body = reply.body if reply.body is not None else _completion_body(request, reply)
        self._send(200, body, reply.headers, cut=fault == "cut_body")


def main(argv: list[str] | None = None) -> None:
    """Serve until killed, printing the base URL first (``python -c "from t2g_core.testing.openai_server import main;
    main()" --latency 0.1``; ``-m`` works too but warns, as the package imports this module)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(latency_s=args.latency, fault_rate=args.fault_rate, seed=args.seed).start()
    print(server.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
