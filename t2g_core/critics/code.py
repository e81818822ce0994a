"""Code critic: run the response against the item's tests in the sandbox and localise the failure (no LLM); the cases,
Ochiai localisation, spans and word labels: docs/annotation.md, "How the code critic localises a failure".
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from t2g_core.critics.mutation import line_scores, variants
from t2g_core.critics.sandbox import CaseResult, SandboxLimits, SandboxRun, run_cases, run_variants, sandbox_workers
from t2g_core.critics.testcases import TestCase, split_check
from t2g_core.spans import ParsedFeedback

FAILED = ("fail", "error", "timeout")
# every case ends like this (or fails while the program loads): the program crashed its harness or never returned
DEGENERATE = ("killed", "timeout")
MUTATED_LINES, MAX_VARIANTS = 8, 48  # mutation-based localisation: the most suspicious lines, variants in all
VARIANT_TIMEOUT_S = 1.0  # a variant that loops costs a second
VARIANT_BUDGET_S = 10.0  # and the variants' session at most ten
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)


@dataclass(frozen=True)
class Program:
    source: str
    code_start: int  # char offset in the response where the executed code starts
    line_offset: int  # program line = line_offset + (1-based line of the code)


def build_program(prompt: str, response: str, entry_point: str | None) -> Program:
    """The program to run: the prompt (signature, docstring, helpers) + a body, or the prompt's prelude + a full
    function."""
    fenced = _FENCE.search(response)
    code_start, code = (fenced.start(1), fenced.group(1)) if fenced else (0, response)
    tree = _tree(code)
    if tree is not None and any(isinstance(n, ast.FunctionDef) and n.name == entry_point for n in tree.body):
        prefix = _prompt_prelude(prompt, entry_point)
    else:
        prefix = prompt if prompt.endswith("\n") or not prompt else prompt + "\n"
    return Program(prefix + code, code_start, prefix.count("\n"))


def _prompt_prelude(prompt: str, entry_point: str | None) -> str:
    """The prompt without its entry-point function (imports and helpers stay)."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return ""
    lines = prompt.splitlines(keepends=True)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return "".join(lines[: first - 1] + lines[node.end_lineno :])
    return prompt if prompt.endswith("\n") else prompt + "\n"


def ochiai(results: list[CaseResult]) -> dict[int, float]:
    """Suspiciousness of every covered line (program line numbers)."""
    failing = [set(r.covered) for r in results if r.outcome in FAILED]
    passing = [set(r.covered) for r in results if r.outcome == "pass"]
    nf = len(failing)
    scores = {}
    for line in set().union(*failing, *passing):
        ef = sum(line in c for c in failing)
        ep = sum(line in c for c in passing)
        scores[line] = ef / math.sqrt(nf * (ef + ep)) if ef else 0.0
    return scores


def unique_quote(response: str, code_start: int, line_no: int) -> str | None:
    """Text of response code line ``line_no`` (1-based) without indentation, extended upward until unique."""
    lines = response[code_start:].split("\n")
    if not 1 <= line_no <= len(lines) or not lines[line_no - 1].strip():
        return None
    first = line_no
    while True:
        quote = "\n".join(lines[first - 1 : line_no]).strip()
        if response.count(quote) == 1 or first == 1:
            return quote
        first -= 1


class CodeCritic:
    """``critique(row) -> ParsedFeedback`` for code items (``tests``, ``entry_point``, ``prompt``, ``response``)."""

    def __init__(
        self, limits: SandboxLimits = SandboxLimits(), max_fault_lines: int = 2, mutation_localisation: bool = True
    ):
        self.limits, self.max_fault_lines = limits, max_fault_lines
        self.mutation_localisation = mutation_localisation

    @classmethod
    def from_config(cls, cfg: Any) -> CodeCritic:
        limits = SandboxLimits(
            timeout_s=cfg.sandbox_timeout_s,
            memory_mb=cfg.sandbox_memory_mb,
            max_procs=cfg.sandbox_max_procs,
            isolation=cfg.sandbox_isolation,
        )
        return cls(limits, cfg.max_fault_lines, cfg.mutation_localisation)

    def run(self, row: dict[str, Any]) -> tuple[Program, list[TestCase], SandboxRun]:
        program = build_program(row.get("prompt") or "", row.get("response") or "", row.get("entry_point"))
        cases = split_check(row["tests"])
        tests = [{"code": c.code} for c in cases]
        return (
            program,
            cases,
            run_cases(program.source, tests, row.get("entry_point"), self.limits, prelude=row.get("prompt") or ""),
        )

    def critique(self, row: dict[str, Any]) -> ParsedFeedback:
        if not (row.get("tests") or "").strip():
            return ParsedFeedback(None, status="missing_input", error=f"item {row.get('id')!r} has no tests")
        try:
            program, cases, run = self.run(row)
        except SyntaxError as exc:
            return ParsedFeedback(
                None, status="sandbox_error", error=f"the tests do not parse: {exc.msg} (line {exc.lineno})"
            )
        if not cases:
            return ParsedFeedback(None, status="sandbox_error", error="the tests hold no assertion on candidate")
        raw = _raw_report(run)
        judged = [r for r in run.results if r.outcome != "judge_error"]  # the tests' own failures blame no one
        unjudged = next((r.message for r in judged if r.outcome == "sandbox_error"), None)  # too loaded to judge
        if run.error or not judged or unjudged:
            first = next((r.message for r in run.results if r.message), "the sandbox produced no result")
            return ParsedFeedback(None, status="sandbox_error", error=run.error or unjudged or first, raw=raw)
        response = row.get("response") or ""
        fenced = _FENCE.search(response)
        code = (fenced.group(1) if fenced else response).strip()  # what a whole-code span quotes
        outcome = 2 * sum(r.outcome == "pass" for r in judged) / len(judged) - 1
        if outcome == 1:  # correct code is rewarded, not just left unpunished
            words = code_word_scores(response, [])
            return ParsedFeedback(
                critique_text(cases, judged, []), [code], [], None, "ok", None, raw, outcome, word_scores=words
            )
        hopeless = not code or all(r.outcome in DEGENERATE for r in judged)  # no line to blame
        degenerate = hopeless or all(r.at_import for r in judged)  # no test reached the function
        lines = [] if hopeless else self.fault_lines(program, judged, row, cases)
        spans = list(dict.fromkeys(q for q in (unique_quote(response, program.code_start, k) for k in lines) if q))
        if not spans and code:  # a failure no line explains (a crash at import, a hang): all of the code
            spans = [code]
        text = "The response holds no code." if not code else critique_text(cases, judged, spans)
        entry = row.get("entry_point")
        absent = not code or any("defines no function" in (r.message or "") for r in judged) or is_stub(program, entry)
        missing = (f"an implementation of {entry or 'the function'}",) if absent else ()
        words = code_word_scores(response, spans)
        return ParsedFeedback(
            text, [], spans, None, "ok", None, raw, outcome, degenerate, missing, (None,) * len(missing), words
        )

    def critique_batch(self, rows: list[dict[str, Any]], workers: int = 2) -> list[ParsedFeedback]:
        """The reward-source protocol: one ParsedFeedback per row, in order (sandboxes run ``workers`` at a time, at
        most one per core)."""
        with ThreadPoolExecutor(max_workers=sandbox_workers(workers)) as pool:
            return list(pool.map(self.critique, rows))

    def fault_lines(
        self,
        program: Program,
        results: list[CaseResult],
        row: dict[str, Any] | None = None,
        cases: list[TestCase] | None = None,
    ) -> list[int]:
        """Code lines (1-based, in the response's code) to blame, best evidence first: the lines that raised; the
        lines a small mutation fixes (``mutation_localisation``: needs ``row`` and ``cases`` to run the variants);
        ``return None`` lines when the failing cases got None; then the top Ochiai lines."""

        def to_code(line: int | None) -> int | None:
            return line - program.line_offset if line is not None and line > program.line_offset else None

        if not any(r.outcome in FAILED + ("syntax_error",) for r in results):
            return []
        raising = Counter(
            k for r in results if r.outcome in ("error", "timeout", "syntax_error") if (k := to_code(r.line))
        )
        picked = [k for k, _ in raising.most_common()]
        passthrough = passthrough_lines(program)
        ranked = [
            line
            for _, _, line in sorted(
                (
                    (s, (line - program.line_offset) not in passthrough, line)
                    for line, s in ochiai(results).items()
                    if s > 0 and to_code(line)
                ),
                reverse=True,
            )
        ]
        if self.mutation_localisation and row is not None and cases:
            scores = self._mutation_scores(program, results, ranked, row, cases)
            picked += [k for line in sorted(scores, key=lambda n: -scores[n]) if (k := to_code(line)) not in picked]
        picked += [k for k in none_returns(program, results) if k not in picked]
        picked += [k for line in ranked if (k := to_code(line)) not in picked]
        return picked[: self.max_fault_lines]

    def _mutation_scores(
        self, program: Program, results: list[CaseResult], ranked: list[int], row: dict[str, Any], cases: list[TestCase]
    ) -> dict[int, int]:
        found = variants(program.source, ranked[:MUTATED_LINES], MAX_VARIANTS)
        if not found:
            return {}
        quick = replace(self.limits, timeout_s=min(self.limits.timeout_s, VARIANT_TIMEOUT_S))
        runs, _ = run_variants(
            [v.program for v in found],
            [{"code": c.code} for c in cases],
            row.get("entry_point"),
            quick,
            prelude=row.get("prompt") or "",
            budget_s=VARIANT_BUDGET_S,
        )
        return line_scores(results, runs, found)


def none_returns(program: Program, results: list[CaseResult]) -> list[int]:
    """Code lines holding ``return None`` / ``return`` that failing cases ran, when those cases got None back."""
    got_none = [r for r in results if r.outcome == "fail" and (r.message or "").startswith("got None,")]
    tree = _tree(program.source) if got_none else None
    if tree is None:
        return []
    covered = set().union(*(r.covered for r in got_none))
    returns = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Return) and _returns_none(n)}
    return sorted(line - program.line_offset for line in returns & covered if line > program.line_offset)


PASSTHROUGH = (ast.Pass, ast.Break, ast.Continue)


def _tree(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _returns_none(node: ast.Return) -> bool:
    return node.value is None or (isinstance(node.value, ast.Constant) and node.value.value is None)


def _is_passthrough(node: ast.AST) -> bool:
    """A statement that only moves values computed elsewhere (``return x``, ``return a, b``, ``for x in xs:``)."""

    def plain(e: ast.AST | None) -> bool:
        return (
            e is None
            or isinstance(e, (ast.Name, ast.Constant))
            or (isinstance(e, ast.Tuple) and all(plain(x) for x in e.elts))
        )

    if isinstance(node, PASSTHROUGH):
        return True
    if isinstance(node, ast.Return):
        return plain(node.value)
    return isinstance(node, ast.For) and isinstance(node.iter, ast.Name)


def passthrough_lines(program: Program) -> set[int]:
    """Code lines holding only pass-through statements: on an Ochiai tie they rank below lines that compute."""
    tree = _tree(program.source)
    if tree is None:
        return set()
    return {
        node.lineno - program.line_offset
        for node in ast.walk(tree)
        if isinstance(node, ast.stmt) and _is_passthrough(node)
    }


def _is_stub_statement(node: ast.stmt) -> bool:
    if isinstance(node, ast.Pass):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # docstring, ``...``
        return isinstance(node.value.value, str) or node.value.value is Ellipsis
    if isinstance(node, ast.Return):
        return _returns_none(node)
    if isinstance(node, ast.Raise) and node.exc is not None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def is_stub(program: Program, entry_point: str | None) -> bool:
    """The entry-point function holds nothing but a docstring, pass, ..., a bare return or NotImplementedError."""
    tree = _tree(program.source)
    funcs = [n for n in (tree.body if tree else []) if isinstance(n, ast.FunctionDef) and n.name == entry_point]
    return bool(funcs) and all(_is_stub_statement(node) for node in funcs[-1].body)


_CODE_WORD = re.compile(r"[A-Za-z0-9_]+")


def code_word_scores(response: str, poor_spans: list[str]) -> tuple[tuple[str, float], ...]:
    """Every word of the response +1, or -1 inside a poor span (spans quote unique text, so ``find`` places them)."""
    poor = [(at, at + len(q)) for q in poor_spans if (at := response.find(q)) >= 0]
    out = []
    for m in _CODE_WORD.finditer(response):
        bad = any(a < m.end() and m.start() < b for a, b in poor)
        out.append((m.group(), -1.0 if bad else 1.0))
    return tuple(out)


def _raw_report(run: SandboxRun) -> str:
    return json.dumps(
        {
            "isolation": run.isolation,
            "error": run.error,
            "cases": [
                {"index": r.index, "outcome": r.outcome, "message": r.message, "line": r.line} for r in run.results
            ],
        }
    )


def critique_text(cases: list[TestCase], results: list[CaseResult], spans: list[str], max_cases: int = 3) -> str:
    if results and results[0].outcome == "syntax_error":
        return f"The code does not compile: {results[0].message}."
    failed = [r for r in results if r.outcome != "pass"]
    if not failed:
        return f"The code passes all {len(results)} test cases."
    parts = [f"The code fails {len(failed)} of {len(results)} test cases."]
    for r in failed[:max_cases]:
        src = cases[r.index].source.splitlines()[0] if r.index < len(cases) else "?"
        what = {
            "fail": f"fails: {r.message}" if r.message else "fails",
            "timeout": "times out (infinite loop or too slow)",
            "error": f"raises {r.message}",
            "killed": f"was stopped: {r.message}",
        }.get(r.outcome, r.outcome)
        parts.append(f"Case {r.index + 1} `{src[:120]}` {what}.")
    if len(failed) > max_cases:
        parts.append(f"{len(failed) - max_cases} more cases fail.")
    if spans:
        parts.append("Most likely at: " + "; ".join(f"`{s.splitlines()[-1].strip()}`" for s in spans) + ".")
    return " ".join(parts)
