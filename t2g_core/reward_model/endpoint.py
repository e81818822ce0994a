"""A reward model served over HTTP: rollouts scored by any OpenAI-compatible server.

``endpoint.prompt=reward_model``: the trained generative adapter (e.g. on vLLM), sent its own prompt
(``prompts.rm_messages``); ``endpoint.prompt=annotator``: a strong LLM as an online critic, sent the annotation
stage's critique prompt. Either way the request goes through the LLM annotator (``t2g_core.annotators.llm``), so a
failed request is a status on its rollout (``ppo.parse_failure_reward``), never a failed step.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from t2g_core.config.annotate import AnnotateConfig
from t2g_core.reward_model.prompts import rm_messages
from t2g_core.spans import ParsedFeedback


def annotate_config(endpoint) -> AnnotateConfig:
    """The annotator settings that serve an :class:`~t2g_core.config.reward_model.EndpointConfig`."""
    return AnnotateConfig(
        annotator="llm",
        base_url=endpoint.base_url,
        model=endpoint.model,
        api_key_env=endpoint.api_key_env,
        mode="critique",
        prompt_version=endpoint.prompt_version,
        # a served reward model answers in its own trained format; a general LLM is asked for the JSON schema
        structured_output="off" if endpoint.prompt == "reward_model" else "auto",
        temperature=endpoint.temperature,
        max_tokens=endpoint.max_tokens,
        concurrency=endpoint.concurrency,
        http_backend=endpoint.http_backend,
        timeout_s=endpoint.timeout_s,
        max_retries=endpoint.max_retries,
    )


def _rm_prompt(row: dict) -> list[dict[str, str]]:
    return rm_messages(row["task"], row["prompt"], row["response"])


class EndpointScorer:
    """``critique_batch(rows) -> list[ParsedFeedback]`` through an OpenAI-compatible endpoint (see module doc)."""

    def __init__(self, cfg, *, api_key: str | None = None, cache_dir: str | Path | None = None):
        from t2g_core.annotators.cache import AnswerCache
        from t2g_core.annotators.llm import LLMAnnotator

        endpoint = cfg.endpoint
        if not endpoint.base_url:
            raise ValueError("ppo.reward_source=endpoint needs reward_model.endpoint.base_url")
        cache = AnswerCache(Path(cache_dir)) if cache_dir is not None else None
        render = _rm_prompt if endpoint.prompt == "reward_model" else None
        self.annotator = LLMAnnotator(annotate_config(endpoint), api_key=api_key, cache=cache, render=render)

    def critique_batch(self, rows: Sequence[dict]) -> list[ParsedFeedback]:
        items = [
            {
                "id": f"rollout-{i}",
                "task": r["task"],
                "prompt": r["prompt"],
                "response": r["response"],
                "tests": r.get("tests"),
            }
            for i, r in enumerate(rows)
        ]
        out = self.annotator.annotate(items, progress=False)
        by_id = {row["id"]: row for row in out}
        return [_feedback(by_id[item["id"]]) for item in items]


def _feedback(row: dict) -> ParsedFeedback:
    return ParsedFeedback(
        critique=row["critique"],
        good_spans=list(row["good_spans"]),
        poor_spans=list(row["poor_spans"]),
        reasoning=row["reasoning"],
        status=row["status"],
        error=row["error"],
        raw=row["raw"],
    )
