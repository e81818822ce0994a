"""Annotation stage: who writes the critiques and spans."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat

from t2g_core.config.base import StageConfig


class AnnotateConfig(StageConfig):
    SECTION = "annotate"
    RENAMED = dict.fromkeys(("price_per_1k_prompt", "price_per_1k_completion"), "price_per_1k ([prompt, completion])")
    annotator: Literal["llm", "code", "reference", "ground"] = Field(
        "reference",
        description="llm = an endpoint; code = tests in a sandbox; reference = compare with the reference; ground = a "
        "human critique.",
    )
    base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint (llm annotator), e.g. http://127.0.0.1:8000/v1."
    )
    model: str = Field("gpt-4o", description="Model name sent to the endpoint.")
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="Environment variable holding the API key (read by the CLI/task, never logged)."
    )
    mode: Literal["critique", "grounding"] = Field(
        "critique",
        description="critique = the LLM writes the critique; grounding = it ties the item's human critique to spans.",
    )
    prompt_version: str = Field("v1", description="Version of the prompt files; part of the cache key.")
    structured_output: Literal["auto", "json_schema", "off"] = Field(
        "auto",
        description="auto = ask for JSON-schema output and fall back to tolerant parsing if the endpoint rejects it.",
    )
    temperature: float = Field(0.2, ge=0, description="Sampling temperature of the annotator.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling of the annotator.")
    max_tokens: int = Field(1200, ge=16, description="Maximum completion tokens per request.")
    concurrency: int = Field(
        8, ge=1, description="Requests in flight at once (code critic: sandboxes, at most one per available core)."
    )
    http_backend: Literal["aiohttp", "httpx"] = Field(
        "aiohttp",
        description="Transport under the openai client: aiohttp (for high concurrency) or httpx (honours httpx proxy "
        "settings).",
    )
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(
        5, ge=0, description="Retries on 429/5xx/timeouts (exponential backoff with jitter, Retry-After honoured)."
    )
    price_per_1k: tuple[NonNegativeFloat, NonNegativeFloat] = Field(
        (0.0, 0.0), description="Cost accounting: price per 1,000 prompt tokens and per 1,000 completion tokens."
    )
    sandbox_timeout_s: float = Field(
        5.0,
        gt=0,
        description="Code critic: limit per call of the candidate in its own time (CPU time, or waiting for anything "
        "but a CPU).",
    )
    sandbox_memory_mb: int = Field(512, ge=64, description="Code critic: address-space limit of the sandboxed process.")
    sandbox_max_procs: int = Field(16, ge=1, description="Code critic: process limit of the sandbox user (fork bombs).")
    mutation_localisation: bool = Field(
        True,
        description="Code critic: also blame the lines whose small mutations make failing tests pass.",
    )
    max_fault_lines: int = Field(
        2, ge=1, description="Code critic: most suspicious lines (Ochiai) quoted as poor spans per failing item."
    )
    only_failed: bool = Field(False, description="Re-annotate only the items whose previous status was not ok.")
    max_answer_chars: int = Field(
        200_000, ge=1000, description="An answer longer than this is not used (status parse_error; raw kept short)."
    )
    max_failure_rate: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Fail the stage, after writing every row, when more than this fraction of items is not ok.",
    )
    sandbox_isolation: Literal["auto", "bwrap", "unshare", "none"] = Field(
        "auto",
        description="Code critic: auto = bubblewrap, else user namespaces, else refuse; none = no isolation (trusted "
        "code only).",
    )
