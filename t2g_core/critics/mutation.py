"""Mutation-based fault localisation: a line is to blame when a small change to it makes failing tests pass.

For the lines the failing cases executed (most suspicious first), each mutable node gets the standard operators
(Metallaxis / MUSE): relational replacement, ``+`` <-> ``-``, ``*`` <-> ``//`` (also augmented), ``and`` <-> ``or``,
integer ``c`` -> ``c +/- 1``; a variant replaces just that node's source text. The variants run in one sandbox
session; a line scores the most failing cases one of its variants fixes, less the passing cases it breaks.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_RELATIONAL = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
_ARITHMETIC = {ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.FloorDiv,), ast.FloorDiv: (ast.Mult,)}
_BOOLEAN = {ast.And: ast.Or, ast.Or: ast.And}
PASSED = "pass"


@dataclass(frozen=True)
class Variant:
    line: int  # program line (1-based) of the changed node
    program: str


def _changed(node: ast.AST) -> list[ast.AST]:  # noqa: PLR0911 - one branch per operator family
    """Every single-operator mutation of ``node`` (a copy each), or none."""
    out = []
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _RELATIONAL:
        for op in _RELATIONAL:
            if op is not type(node.ops[0]):
                out.append(copy.copy(node))
                out[-1].ops = [op()]
        return out
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _ARITHMETIC:
        for op in _ARITHMETIC[type(node.op)]:
            out.append(copy.copy(node))
            out[-1].op = op()
        return out
    if isinstance(node, ast.BoolOp):
        out.append(copy.copy(node))
        out[-1].op = _BOOLEAN[type(node.op)]()
        return out
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [ast.Constant(node.value + 1), ast.Constant(node.value - 1)]
    return out


def _splice(source: str, node: ast.AST, replacement: ast.AST) -> str | None:
    """``source`` with ``node``'s own text replaced by ``replacement`` unparsed (None if it spans lines)."""
    if node.lineno != node.end_lineno:
        return None
    lines = source.splitlines(keepends=True)
    line = lines[node.lineno - 1]
    # col offsets are in UTF-8 bytes
    raw = line.encode()
    text = raw[: node.col_offset].decode() + ast.unparse(replacement) + raw[node.end_col_offset :].decode()
    return "".join(lines[: node.lineno - 1] + [text] + lines[node.lineno :])


def variants(source: str, lines: Iterable[int], limit: int) -> list[Variant]:
    """Mutants of ``source`` on ``lines`` (in the given order of suspicion), at most ``limit``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    by_line: dict[int, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if hasattr(node, "lineno") and not isinstance(node, ast.stmt) or isinstance(node, ast.AugAssign):
            by_line.setdefault(node.lineno, []).append(node)
    out: list[Variant] = []
    for line in lines:
        for node in sorted(by_line.get(line, []), key=lambda n: n.col_offset):
            for replacement in _changed(node):
                program = _splice(source, node, replacement)
                if program is not None and program != source:
                    out.append(Variant(line, program))
                if len(out) >= limit:
                    return out
    return out


def line_scores(base: Sequence, runs: Sequence[Sequence], variants_: Sequence[Variant]) -> dict[int, int]:
    """Per line: max over its variants of (failing cases now passing - passing cases now failing), when positive.

    ``base`` and each run are case results (``.index``, ``.outcome``); a variant the session did not reach (an empty
    run) counts for nothing."""
    failing = {r.index for r in base if r.outcome != PASSED}
    passing = {r.index for r in base if r.outcome == PASSED}
    scores: dict[int, int] = {}
    for variant, run in zip(variants_, runs, strict=True):
        if not run:
            continue
        now = {r.index: r.outcome for r in run}
        fixed = sum(now.get(i) == PASSED for i in failing)
        broken = sum(now.get(i) != PASSED for i in passing)
        if fixed and fixed - broken > 0:
            scores[variant.line] = max(scores.get(variant.line, 0), fixed - broken)
    return scores
