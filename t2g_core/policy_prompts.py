"""The policy's input: the one place where a task prompt becomes the text the policy model is conditioned on.

Warm start, PPO rollouts and evaluation all call :func:`render_policy_prompt`, so the policy never sees a prompt
formatted differently at training and at test time.
"""

from __future__ import annotations

INSTRUCTIONS = {
    "summarization": "Summarize the post in one sentence.",
    "code": "Complete the body of the Python function.",
    "qa": "Answer the question in one sentence.",
}


def policy_messages(task: str, prompt: str) -> list[dict[str, str]]:
    """Chat messages for ``task``: one user turn holding the instruction and the prompt."""
    try:
        instruction = INSTRUCTIONS[task]
    except KeyError:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(INSTRUCTIONS)}") from None
    return [{"role": "user", "content": f"{instruction}\n{prompt}"}]


def render_policy_prompt(tokenizer, task: str, prompt: str) -> str:
    """The prompt rendered with the tokenizer's chat template, ending with the assistant's generation prompt.

    The text already holds the template's special tokens (BOS included): tokenize it with ``add_special_tokens=False``.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template")
    return tokenizer.apply_chat_template(policy_messages(task, prompt), tokenize=False, add_generation_prompt=True)
