"""Per-item task metrics for policy responses (per item, so two policies compare item by item); which metrics each
task gets: docs/pipeline.md, "Evaluation metrics per task".
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from t2g_core.critics.reference import ReferenceCritic
from t2g_core.demo.summarization import summary_errors
from t2g_core.evaluation.execution import TestOutcome, run_humaneval

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "summarization": tuple(
        "rouge1 rouge2 rougeL bleu length_words length_chars fact_precision fact_recall invented_entity_rate "
        "fact_error".split()
    ),
    "code": ("passed",),
    "qa": ("token_f1", "exact_match", "reference_score"),
}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for ``n`` samples of which ``c`` pass: ``1 - C(n-c, k) / C(n, k)`` (numerically stable form)."""
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if k < 1 or k > n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@lru_cache(maxsize=1)
def _rouge_scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def rouge_scores(response: str, reference: str) -> dict[str, float]:
    """ROUGE-1/2/L F1 of ``response`` against ``reference``."""
    scores = _rouge_scorer().score(reference, response)
    return {name: float(scores[name].fmeasure) for name in ROUGE_TYPES}


def sentence_bleu(response: str, reference: str) -> float:
    """sacrebleu sentence BLEU (0-100, exponential smoothing)."""
    import sacrebleu

    return float(sacrebleu.sentence_bleu(response, [reference]).score)


def corpus_bleu(responses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu corpus BLEU (0-100) over aligned lists."""
    import sacrebleu

    return float(sacrebleu.corpus_bleu(list(responses), [list(references)]).score)


def _meta(row: dict[str, Any]) -> dict[str, Any]:
    meta = row.get("meta")
    if meta is None or (isinstance(meta, float) and np.isnan(meta)):
        return {}
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = getattr(exc, "msg", "nested too deeply")
            raise ValueError(f"item {row.get('id')!r}, column 'meta': not valid JSON ({msg})") from exc
    return meta if isinstance(meta, dict) else {}


def fact_metrics(response: str, facts: dict[str, str]) -> dict[str, float]:
    """Demo summaries: fact precision / recall, invented-entity rate and task error from the demo's own scorer
    (``t2g_core.demo.summarization.summary_errors``: the template's clauses, then free-text mentions of each fact).
    """
    score = summary_errors(response, facts)
    return {
        "fact_precision": float(score.precision),
        "fact_recall": float(score.recall),
        "invented_entity_rate": float(score.invented_rate),
        "fact_error": float(score.error),
    }


def _text_or_none(value: Any) -> str | None:
    """A usable text, or None for a missing one (None, NaN from a Parquet null, an empty string)."""
    return value if isinstance(value, str) and value.strip() else None


def summarization_metrics(row: dict[str, Any]) -> dict[str, float]:
    """Per-item summarization metrics; the reference-based ones only when the item has a reference."""
    response, reference = row["response"], _text_or_none(row.get("reference"))
    out = {"length_words": float(len(response.split())), "length_chars": float(len(response))}
    if reference is not None:
        out.update(rouge_scores(response, reference))
        out["bleu"] = sentence_bleu(response, reference)
    facts = _meta(row).get("facts")
    if isinstance(facts, dict) and facts:
        out.update(fact_metrics(response, {str(k): str(v) for k, v in facts.items()}))
    return out


def _normalize_answer(text: str) -> list[str]:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return text.split()


def token_f1(response: str, reference: str) -> float:
    """SQuAD-style token F1 (lowercased, punctuation and articles removed)."""
    pred, gold = _normalize_answer(response), _normalize_answer(reference)
    if not pred or not gold:
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def critic_score(parsed: Any) -> float:
    """Span score of a ParsedFeedback: good / (good + poor); 0.0 when it quotes nothing (nothing correct was said);
    NaN when the critic itself failed (the item is then left out of the mean, not counted as wrong)."""
    if getattr(parsed, "status", "ok") != "ok":
        return float("nan")
    good, poor = len(parsed.good_spans), len(parsed.poor_spans)
    return good / (good + poor) if good + poor else 0.0


def qa_metrics(row: dict[str, Any], critic: Any | None = None) -> dict[str, float]:
    response, reference = row["response"], _text_or_none(row.get("reference"))
    out: dict[str, float] = {}
    if reference is not None:
        out["token_f1"] = token_f1(response, reference)
        out["exact_match"] = float(_normalize_answer(response) == _normalize_answer(reference))
    if critic is not None:
        out["reference_score"] = critic_score(critic.critique({**row, "meta": _meta(row)}))
    return out


def code_metrics(
    row: dict[str, Any], runner: Callable[..., TestOutcome] = run_humaneval, timeout_s: float = 10.0
) -> dict[str, Any]:
    """Run one sample against the item's tests; ``passed`` is 1.0 or 0.0 (NaN when the sandbox failed) and
    ``status`` says why it did not pass."""
    if not row.get("tests") or not row.get("entry_point"):
        raise ValueError(f"item {row.get('id')!r}: code items need 'tests' and 'entry_point'")
    outcome = runner(row["prompt"], row["response"], row["tests"], row["entry_point"], timeout_s=timeout_s)
    passed = float("nan") if outcome.status == "sandbox_error" else float(outcome.passed)  # not the sample's fault
    return {"passed": passed, "status": outcome.status, "error": outcome.error}


def task_metrics(task: str, rows: Sequence[dict[str, Any]], **kwargs: Any) -> list[dict[str, Any]]:
    """Per-item metric dicts for ``rows`` (dicts with the feedback columns; ``response`` = the policy's answer)."""
    if task == "summarization":
        return [summarization_metrics(r) for r in rows]
    if task == "qa":
        critic = kwargs["critic"] if "critic" in kwargs else ReferenceCritic()  # the annotation stage's
        return [qa_metrics(r, critic) for r in rows]
    if task == "code":
        runner = kwargs.get("runner", run_humaneval)
        timeout_s = kwargs.get("timeout_s", 10.0)
        return [code_metrics(r, runner, timeout_s) for r in rows]
    raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASK_METRICS)}")
