"""The reward model's input and target text: one builder per task, shared by training, evaluation and scoring (why one
builder, and how an over-budget prompt is cut: docs/reward_model.md, "Prompts and targets").
"""

from __future__ import annotations

import json
from dataclasses import dataclass

TRUNCATION_MARK = " [...]"

_JSON_SHAPE = '{"critique": str, "good_spans": [str], "poor_spans": [str]}'


@dataclass(frozen=True)
class TaskPrompt:
    """How one task shows its (prompt, response) to the reward model."""

    instruction: str
    prompt_header: str
    response_header: str


def _instruction(what: str, against: str, good: str, poor: str) -> str:
    return (
        f"Critique the {what} against the {against}. Then quote exactly from the {what} its good spans ({good}) "
        f"and poor spans ({poor}). Answer with JSON only: {_JSON_SHAPE}"
    )


TASK_PROMPTS: dict[str, TaskPrompt] = {
    "summarization": TaskPrompt(
        _instruction("summary", "post", "supported facts", "wrong or invented facts"), "### Post", "### Summary"
    ),
    "code": TaskPrompt(
        _instruction("solution", "problem", "correct code", "buggy code"), "### Problem", "### Solution"
    ),
    "qa": TaskPrompt(
        _instruction("answer", "question", "correct claims", "wrong claims"), "### Question", "### Answer"
    ),
}


@dataclass(frozen=True)
class RMPrompt:
    """A rendered prompt and the content it shows (after any truncation)."""

    text: str
    prompt: str  # the prompt content as shown (maybe truncated)
    response: str  # the response as shown (maybe truncated)
    n_tokens: int
    truncated: bool


def _task_prompt(task: str) -> TaskPrompt:
    try:
        return TASK_PROMPTS[task]
    except KeyError:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASK_PROMPTS)}") from None


def _messages(spec: TaskPrompt, prompt: str, response: str) -> list[dict[str, str]]:
    user = f"{spec.instruction}\n\n{spec.prompt_header}\n{prompt}\n\n{spec.response_header}\n{response}"
    return [{"role": "user", "content": user}]


def rm_messages(task: str, prompt: str, response: str) -> list[dict[str, str]]:
    """The RM's input as chat messages (what a server applies its chat template to: the same text as training's)."""
    return _messages(_task_prompt(task), prompt, response)


def _render(tokenizer, spec: TaskPrompt, prompt: str, response: str) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; the reward model needs one"
        )
    return tokenizer.apply_chat_template(_messages(spec, prompt, response), tokenize=False, add_generation_prompt=True)


def count_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def truncate_to_tokens(tokenizer, text: str, n: int) -> str:
    """The longest prefix of ``text`` made of its first ``n`` tokens (cut on a token boundary), plus a mark."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=bool(getattr(tokenizer, "is_fast", False)))
    ids = enc["input_ids"]
    if len(ids) <= n:
        return text
    if n <= 0:
        return TRUNCATION_MARK.strip()
    if "offset_mapping" in enc:
        cut = text[: enc["offset_mapping"][n - 1][1]]
    else:  # slow tokenizer: decode the kept ids
        cut = tokenizer.decode(ids[:n], skip_special_tokens=True)
    return cut + TRUNCATION_MARK


def _split_budget(budget: int, n_prompt: int, n_response: int) -> tuple[int, int]:
    """Token budgets (prompt, response): the response (the text spans are quoted from) keeps at least half."""
    keep_response = min(n_response, max(budget // 2, budget - n_prompt))
    return budget - keep_response, keep_response


def render_rm_prompt(tokenizer, task: str, prompt: str, response: str, max_prompt_tokens: int) -> RMPrompt:
    """Render the RM prompt for (prompt, response), truncating the content (never the template) to the budget."""
    spec = _task_prompt(task)
    text = _render(tokenizer, spec, prompt, response)
    n = count_tokens(tokenizer, text)
    if n <= max_prompt_tokens:
        return RMPrompt(text, prompt, response, n, truncated=False)
    overhead = count_tokens(tokenizer, _render(tokenizer, spec, TRUNCATION_MARK, TRUNCATION_MARK))
    budget = max_prompt_tokens - overhead
    if budget < 8:
        raise ValueError(
            f"max_prompt_tokens={max_prompt_tokens} leaves {budget} tokens for the content: the {task} template alone "
            f"takes {overhead}; raise reward_model.max_prompt_tokens"
        )
    n_prompt, n_response = count_tokens(tokenizer, prompt), count_tokens(tokenizer, response)
    for _ in range(8):  # tokens can merge across the cut; shrink until the rendered prompt fits
        keep_p, keep_r = _split_budget(budget, n_prompt, n_response)
        shown_p, shown_r = (
            truncate_to_tokens(tokenizer, prompt, keep_p),
            truncate_to_tokens(tokenizer, response, keep_r),
        )
        text = _render(tokenizer, spec, shown_p, shown_r)
        n = count_tokens(tokenizer, text)
        if n <= max_prompt_tokens:
            return RMPrompt(text, shown_p, shown_r, n, truncated=True)
        budget -= n - max_prompt_tokens
    raise ValueError(f"could not fit the {task} prompt into {max_prompt_tokens} tokens")


def build_rm_prompt(tokenizer, task: str, prompt: str, response: str, max_prompt_tokens: int) -> str:
    """The RM's input text for (prompt, response): the single builder used by training, evaluation and scoring."""
    return render_rm_prompt(tokenizer, task, prompt, response, max_prompt_tokens).text


def build_rm_target(critique: str | None, good_spans: list[str], poor_spans: list[str], eos: str) -> str:
    """The RM's target: the critique, then the quoted spans, as one JSON object, then the EOS token text."""
    obj = {"critique": critique or "", "good_spans": list(good_spans), "poor_spans": list(poor_spans)}
    return json.dumps(obj, ensure_ascii=False) + eos
