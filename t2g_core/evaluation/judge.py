"""Pairwise LLM judge behind any OpenAI-compatible endpoint, with position bias controlled.

Each item is judged in both orders; each gives the candidate 1 (win), 0.5 (tie) or 0 (loss), and the item's score
is their mean, so a judge that always prefers the first answer produces ties, not wins. Win rate = (wins + ties / 2)
/ judged items. An item whose request or reply fails keeps its status, error and replies and is left out of the rate
(none judged: "not judged"). Requests carry ``max_tokens``, so a judge that rambles is cut short.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import json_repair

if TYPE_CHECKING:
    from t2g_core.config import EvaluateConfig

JUDGE_SYSTEM = (
    "You are an impartial judge. Compare two answers to the same request for correctness, faithfulness to the "
    "request and helpfulness. Ignore the order in which they are shown and their length. Reply with JSON only: "
    '{"reason": "<one sentence>", "winner": "1" | "2" | "tie"}.'
)


def judge_messages(prompt: str, first: str, second: str) -> list[dict[str, str]]:
    user = f"## Request\n{prompt}\n\n## Answer 1\n{first}\n\n## Answer 2\n{second}\n\nWhich answer is better?"
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


_BARE = re.compile(r"^\W*(1|2|tie)\W*$", re.IGNORECASE)
MAX_TOKENS = 256  # a verdict is a sentence and a word; reasoning models need room before it


def parse_verdict(text: str) -> str:
    """'1', '2' or 'tie' from the judge's reply (JSON, possibly malformed, or a bare word); ValueError otherwise."""
    bare = _BARE.match(text or "")
    if bare:
        return bare.group(1).lower()
    try:
        data = json_repair.loads(text or "")
    except RecursionError:  # nested deeper than Python's stack: no verdict to read
        data = None
    winner = str(data.get("winner", "")).strip().lower() if isinstance(data, dict) else ""
    winner = {"answer 1": "1", "answer 2": "2", "a": "1", "b": "2"}.get(winner, winner)
    if winner not in ("1", "2", "tie"):
        raise ValueError(f"no winner '1', '2' or 'tie' in judge reply {text!r:.120}")
    return winner


@dataclass(frozen=True)
class PairJudgement:
    """Both orders of one item; ``score`` is the candidate's (b's) score in [0, 1], None when not judged."""

    verdict_ab: str | None  # winner with baseline shown first
    verdict_ba: str | None  # winner with candidate shown first
    score: float | None
    outcome: str | None  # "win" | "loss" | "tie" (for the candidate)
    status: str  # "ok" | "api_error" | "parse_error"
    error: str | None = None
    reply_ab: str | None = None  # the judge's replies, as sent (for a parse_error, what could not be read)
    reply_ba: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def combine(verdict_ab: str, verdict_ba: str) -> tuple[float, str]:
    """Candidate score and outcome from the two orders' verdicts."""
    s_ab = {"2": 1.0, "tie": 0.5, "1": 0.0}[verdict_ab]  # candidate was answer 2
    s_ba = {"1": 1.0, "tie": 0.5, "2": 0.0}[verdict_ba]  # candidate was answer 1
    score = (s_ab + s_ba) / 2
    return score, "win" if score > 0.5 else "loss" if score < 0.5 else "tie"


class PairwiseJudge:
    """``judge(prompts, baseline_answers, candidate_answers) -> list[PairJudgement]`` over an OpenAI-compatible
    client."""

    def __init__(
        self, client: Any, model: str, concurrency: int = 4, temperature: float = 0.0, max_tokens: int = MAX_TOKENS
    ):
        self.client, self.model, self.concurrency, self.temperature = client, model, concurrency, temperature
        self.max_tokens = max_tokens

    @classmethod
    def from_endpoint(
        cls,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        concurrency: int = 4,
        max_tokens: int = MAX_TOKENS,
    ) -> PairwiseJudge:
        from openai import OpenAI

        client = OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=2)
        return cls(client, model, concurrency, max_tokens=max_tokens)

    def _ask(self, prompt: str, first: str, second: str) -> str:
        reply = self.client.chat.completions.create(
            model=self.model,
            messages=judge_messages(prompt, first, second),
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        return reply.choices[0].message.content or ""

    def judge_one(self, prompt: str, baseline: str, candidate: str) -> PairJudgement:
        replies: list[str] = []
        try:
            replies.append(self._ask(prompt, baseline, candidate))
            replies.append(self._ask(prompt, candidate, baseline))
        except Exception as exc:  # noqa: BLE001 - any client/transport failure is recorded on the item
            return PairJudgement(None, None, None, None, "api_error", _failure_text(exc), *replies)
        try:
            v_ab, v_ba = parse_verdict(replies[0]), parse_verdict(replies[1])
        except ValueError as exc:
            return PairJudgement(None, None, None, None, "parse_error", str(exc), *replies)
        score, outcome = combine(v_ab, v_ba)
        return PairJudgement(v_ab, v_ba, score, outcome, "ok", None, *replies)

    def judge(self, prompts: Sequence[str], baseline: Sequence[str], candidate: Sequence[str]) -> list[PairJudgement]:
        if not len(prompts) == len(baseline) == len(candidate):
            raise ValueError("judge: prompts, baseline and candidate answers must have the same length")
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self.judge_one, prompts, baseline, candidate))


def judge_for(cfg: EvaluateConfig, api_key: str | None) -> PairwiseJudge | None:
    """The judge ``cfg`` names (``judge_base_url``, ``judge_model``...), or None when it names none; ``api_key`` is
    handed in by the caller, from the variable ``cfg.judge_api_key_env`` names."""
    if not cfg.judge_base_url:
        return None
    return PairwiseJudge.from_endpoint(
        cfg.judge_base_url,
        cfg.judge_model,
        api_key,
        cfg.judge_timeout_s,
        cfg.judge_concurrency,
        max_tokens=cfg.judge_max_tokens,
    )


def _failure_text(exc: Exception) -> str:
    """What went wrong with a request: the server's own words for an HTTP error (see ``status_error_text``)."""
    import openai

    from t2g_core.annotators.failures import status_error_text

    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {status_error_text(exc)}"
    return f"{type(exc).__name__}: {exc}"[:300]


def win_rate(judgements: Sequence[PairJudgement]) -> dict[str, float | None]:
    """Wins, losses, ties, failed items and the candidate's win rate (ties count half; None when nothing was
    judged: there is no rate to report)."""
    ok = [j for j in judgements if j.status == "ok"]
    wins = sum(j.outcome == "win" for j in ok)
    ties = sum(j.outcome == "tie" for j in ok)
    return {
        "judged": float(len(ok)),
        "failed": float(len(judgements) - len(ok)),
        "wins": float(wins),
        "losses": float(len(ok) - wins - ties),
        "ties": float(ties),
        "win_rate": (wins + ties / 2) / len(ok) if ok else None,
        # both orders picked the same position, so different answers: a sign of position bias
        "position_disagreements": float(sum(j.verdict_ab == j.verdict_ba and j.verdict_ab in ("1", "2") for j in ok)),
    }


def first_error(judgements: Sequence[PairJudgement]) -> str | None:
    """The first failed item's error: what a "not judged" summary shows."""
    return next((j.error for j in judgements if j.status != "ok" and j.error), None)
