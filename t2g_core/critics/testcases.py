"""Split test code into separate cases, one assertion statement each (ast), so one failure hides no other.

Each top-level statement of ``check(candidate)`` holding an ``assert`` is one case; the others (imports, helpers) are
a prelude kept before every later case. ``a == b`` asserts become ``__t2g_eq(a, b, left_is_actual)`` so a failure
reports actual and expected. Tests without ``check`` are one case.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class TestCase:
    source: str  # the statement as written, for the critique
    code: str  # module source defining check(candidate) for this case


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


class _EqRewriter(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            left, right = test.left, test.comparators[0]
            left_actual = _mentions(left, "candidate") or not _mentions(right, "candidate")
            call = ast.Call(ast.Name("__t2g_eq", ast.Load()), [left, right, ast.Constant(left_actual)], [])
            return ast.copy_location(ast.Assert(call, None), node)
        if node.msg is None:
            node.msg = ast.Constant(ast.unparse(test)[:200])
        return node


def split_check(tests: str) -> list[TestCase]:
    """Cases of ``tests``; raises SyntaxError when the tests do not parse."""
    module = ast.parse(tests)
    check = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None:
        return [TestCase(tests.strip()[:200], tests)]
    others = [n for n in module.body if n is not check]
    prelude: list[ast.stmt] = []
    cases = []
    for stmt in check.body:
        has_assert = any(isinstance(n, ast.Assert) for n in ast.walk(stmt))
        if not has_assert:
            prelude.append(stmt)
            continue
        if not _mentions(stmt, "candidate"):  # `assert True, "..."` and the like test nothing
            continue
        body = [*prelude, _EqRewriter().visit(ast.parse(ast.unparse(stmt)).body[0])]
        func = ast.FunctionDef(
            name=check.name, args=check.args, body=body, decorator_list=[], returns=None, type_comment=None
        )
        code = ast.unparse(ast.fix_missing_locations(ast.Module([*others, func], [])))
        cases.append(TestCase(ast.unparse(stmt), code))
    return cases
