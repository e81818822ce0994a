"""What an endpoint really does, judged from its answers: does it honour ``response_format`` (:class:`SchemaCheck`),
and how many requests does it run at once (:class:`Pacing`). docs/annotation.md, "What an endpoint really does".
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from t2g_core.annotators.prompts import SPAN_JSON_SCHEMA

JSON_INSTRUCTION = (
    "Reply with the JSON object only: no text before or after it, no code fence. It must match this JSON schema:"
)


def with_json_instruction(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """``messages`` with the span schema spelled out at the end of the last turn (for an endpoint that ignores
    ``response_format``)."""
    schema = json.dumps(SPAN_JSON_SCHEMA["schema"], separators=(",", ":"))
    *head, last = messages
    return [*head, {**last, "content": f"{last['content']}\n\n{JSON_INSTRUCTION}\n{schema}"}]


def opens_json(content: Any) -> bool:
    """Whether an answer could come from a schema-constrained decoder: it opens a JSON object (after a ```` ```json ````
    fence at most). Truncated JSON still opens one; prose, an empty answer or a run of newlines does not."""
    text = content.lstrip() if isinstance(content, str) else ""
    if text.startswith("```"):
        text = text.partition("\n")[2].lstrip()
    return text.startswith("{")


@dataclass
class SchemaCheck:
    """Answers to requests that carried ``response_format``: how many were not JSON, and the verdict."""

    window: int = 8
    recent: deque[bool] = field(default_factory=deque)  # True: that answer was not JSON; the last ``window``
    prose: int = 0
    checked: int = 0
    ignored: bool = False

    def observe(self, content: Any) -> bool:
        """Record one answer to a request that carried the schema; True when it is not JSON."""
        prose = not opens_json(content)
        self.recent.append(prose)
        if len(self.recent) > self.window:
            self.recent.popleft()
        self.checked, self.prose = self.checked + 1, self.prose + prose
        return prose

    def decide(self, expected: int = 0) -> bool:
        """True once, when the endpoint is found to ignore the schema: most of the last ``window`` answers were not
        JSON (or of all of them, when fewer than ``window`` are ``expected`` in this run)."""
        if self.ignored or not self.recent or len(self.recent) < min(self.window, max(expected, 1)):
            return False
        self.ignored = 2 * sum(self.recent) > len(self.recent)
        return self.ignored

    def message(self, fallback: bool) -> str:
        head = f"the endpoint ignored response_format: {self.prose} of {self.checked} answers were not JSON; "
        if fallback:
            return head + "asking for JSON in the prompt instead"
        return head + "annotate.structured_output=json_schema keeps asking for it (auto asks in the prompt instead)"


@dataclass
class Pacing:
    """Requests in flight: ``limit``, lowered to 1 when the first answers show a server that queues (module doc)."""

    limit: int
    timeout_s: float
    first: list[float] = field(default_factory=list)  # latencies of the first requests' answers, in the order they came
    first_answer_at: float | None = None
    decided: bool = False

    def observe(self, latency_s: float, now: float) -> str | None:
        """Record one answered request (``now``: when its answer came, on ``time.perf_counter``'s clock); the
        one-line reason when this lowers ``limit``. Only requests sent before the first answer came count: those
        were sent together, so their latencies show the queue (a later one may have found it shorter)."""
        if self.decided or self.limit < 3:
            return None
        if self.first_answer_at is None:
            self.first_answer_at = now
        elif now - latency_s >= self.first_answer_at:
            return None
        self.first.append(latency_s)
        if len(self.first) < 3:
            return None
        self.decided = True
        first, second, third = self.first
        gaps = (second - first, third - second)  # a queue: each about the service time; side by side: about 0
        queued = min(gaps) >= 0.25 * first and max(gaps) <= 2.5 * min(gaps)
        service_s = (third - first) / 2
        if not queued or self.limit * service_s <= self.timeout_s / 2:
            return None
        old, self.limit = self.limit, 1
        return (
            f"the endpoint answers one request at a time (the first answers came {first:.1f}, {second:.1f} and "
            f"{third:.1f} s after they were sent): {old} in flight would queue for about {old * service_s:.0f} s of a "
            f"{self.timeout_s:g} s timeout, so annotate.concurrency is lowered to 1 for this run"
        )
