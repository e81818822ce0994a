"""Metric names in words for plot titles: what is measured, its unit, and which way is better.

``fact_error`` -> ``fact error (%, lower is better)``; PPO history keys keep their context
(``eval/task_fact_error`` -> ``held-out fact error (%, lower is better)``). Rates are plotted in percent, as the
comparison table shows them (:func:`t2g_core.evaluation.report._fmt`).
"""

from __future__ import annotations

# metric -> (words, unit, better): better is "higher", "lower" or "" (no better side, e.g. a length)
WORDS: dict[str, tuple[str, str, str]] = {
    "fact_error": ("fact error", "%", "lower"),
    "invented_entity_rate": ("invented values", "%", "lower"),
    "fact_precision": ("fact precision", "%", "higher"),
    "fact_recall": ("fact recall", "%", "higher"),
    "rouge1": ("ROUGE-1", "%", "higher"),
    "rouge2": ("ROUGE-2", "%", "higher"),
    "rougeL": ("ROUGE-L", "%", "higher"),
    "bleu": ("BLEU", "0-100", "higher"),
    "corpus_bleu": ("corpus BLEU", "0-100", "higher"),
    "length_words": ("response length", "words", ""),
    "length_chars": ("response length", "characters", ""),
    "token_f1": ("token F1", "%", "higher"),
    "exact_match": ("exact match", "%", "higher"),
    "reference_score": ("reference critic's score", "%", "higher"),
    "judge_score": ("judge's score", "%", "higher"),
    "error": ("task error", "%", "lower"),
    "imprecision": ("stated facts that are wrong", "%", "lower"),
    "invented_rate": ("invented values among those stated", "%", "lower"),
    "length": ("response length", "words", ""),
    "reward/total_mean": ("mean total reward per response", "reward units", "higher"),
    "reward/span_mean": ("mean span reward per response", "reward units", "higher"),
    "reward/negative_frac": ("tokens with a negative reward", "%", "lower"),
    "reward/positive_frac": ("tokens with a positive reward", "%", "higher"),
    "kl/mean": ("KL from the policy before PPO", "nats per response", ""),
    "kl/per_token": ("KL from the policy before PPO", "nats per token", ""),
    "kl/beta": ("KL coefficient", "", ""),
    "eval/span_mean": ("held-out mean span reward", "reward units", "higher"),
    "eval/negative_tokens": ("held-out tokens marked poor", "per response", "lower"),
    "spans/unmatched_rate": ("quotes matching no text", "%", "lower"),
    "parse/failure_rate": ("critiques that did not parse", "%", "lower"),
    "response/length": ("response length", "tokens", ""),
    "policy/entropy": ("policy entropy", "nats per token", ""),
    "loss/policy": ("policy loss", "", ""),
    "loss/value": ("value loss", "", ""),
    "value/explained_variance": ("value explained variance", "", "higher"),
    "ppo/clipfrac": ("clipped policy ratios", "%", ""),
    "ppo/approx_kl": ("approximate KL of one update", "nats", ""),
    "time/step": ("time per PPO step", "s", "lower"),
}
PERCENT = "%"
CONTEXT = (("eval/task_", "held-out "), ("task/", "training "))


def _words(metric: str) -> tuple[str, str, str]:
    if metric in WORDS:
        return WORDS[metric]
    if metric.startswith("pass@"):
        return (metric, PERCENT, "higher")
    for prefix, context in CONTEXT:
        if metric.startswith(prefix) and metric.removeprefix(prefix) in WORDS:
            words, unit, better = WORDS[metric.removeprefix(prefix)]
            return (context + words, unit, better)
    return (metric.replace("/", " ").replace("_", " "), "", "")


def is_percent(metric: str) -> bool:
    """A rate in 0-1 that plots and tables show in percent."""
    return _words(metric)[1] == PERCENT


def words(metric: str) -> str:
    """``fact error``: the metric in words alone."""
    return _words(metric)[0]


def title(metric: str) -> str:
    """``fact error (%, lower is better)``: the metric in words, its unit and the better direction."""
    words, unit, better = _words(metric)
    notes = [n for n in (unit, f"{better} is better" if better else "") if n]
    return f"{words} ({', '.join(notes)})" if notes else words
