"""Code critic on HumanEval: canonical solutions get no poor spans; mutants get the failing cases and the line."""

from __future__ import annotations

import pytest

from t2g_core.critics.code import CodeCritic, build_program, ochiai, unique_quote
from t2g_core.critics.sandbox import CaseResult, SandboxLimits
from t2g_core.critics.testcases import split_check
from t2g_core.demo.code import load_problems, mutants

CRITIC = CodeCritic(SandboxLimits(timeout_s=3.0))


def problem(n: int) -> dict:
    return next(p for p in load_problems() if p["task_id"] == f"HumanEval/{n}")


def row(p: dict, response: str | None = None) -> dict:
    return {
        "id": p["task_id"],
        "task": "code",
        "prompt": p["prompt"],
        "response": response or p["canonical_solution"],
        "tests": p["test"],
        "entry_point": p["entry_point"],
        "meta": {},
    }


def test_split_check_makes_one_case_per_assert_and_keeps_the_prelude():
    cases = split_check(problem(0)["test"])
    assert len(cases) == 7 and all(c.source.startswith("assert candidate(") for c in cases)
    assert "__t2g_eq(candidate(" in cases[0].code
    loop = split_check(problem(32)["test"])
    assert len(loop) == 1 and "rng = random.Random(42)" in loop[0].code and loop[0].source.startswith("for _ in")
    whole = split_check("assert 1 + 1 == 2\n")
    assert len(whole) == 1


@pytest.mark.parametrize("n", [0, 2, 12, 32])
def test_canonical_solutions_pass_with_no_poor_spans(n):
    fb = CRITIC.critique(row(problem(n)))
    assert fb.status == "ok" and fb.poor_spans == [] and "passes all" in fb.critique


def test_a_mutant_is_caught_and_its_line_quoted():
    p = problem(2)  # return number % 1.0
    m = next(m for m in mutants(p["prompt"], p["canonical_solution"]) if m.kind == "change_return")
    fb = CRITIC.critique(row(p, m.response))
    assert fb.status == "ok" and fb.good_spans == []
    assert "got None, expected 0.5" in fb.critique
    start, end = m.span
    assert any(m.response.find(q) < end and m.response.find(q) + len(q) > start for q in fb.poor_spans), fb.poor_spans


def test_exception_line_is_blamed():
    p = problem(2)
    fb = CRITIC.critique(row(p, "    x = [][0]\n    return number % 1.0\n"))
    assert fb.poor_spans[0] == "x = [][0]" and "IndexError" in fb.critique


def test_syntax_error_and_missing_tests():
    p = problem(2)
    fb = CRITIC.critique(row(p, "    return number %% 1.0\n"))
    assert fb.status == "ok" and "does not compile" in fb.critique and fb.poor_spans == ["return number %% 1.0"]
    assert CRITIC.critique(dict(row(p), tests=None)).status == "missing_input"


def test_full_function_responses_and_fenced_code():
    p = problem(2)
    response = "Here you go:\n```python\ndef truncate_number(number: float) -> float:\n    return number // 1.0\n```\n"
    prog = build_program(p["prompt"], response, "truncate_number")
    assert prog.source.count("def truncate_number") == 1
    fb = CRITIC.critique(row(p, response))
    assert fb.poor_spans == ["return number // 1.0"]


def test_ochiai_ranks_the_line_only_failing_cases_run():
    results = [
        CaseResult(0, "pass", None, None, (1, 2, 4)),
        CaseResult(1, "fail", None, None, (1, 3, 4)),
        CaseResult(2, "pass", None, None, (1, 2, 4)),
    ]
    scores = ochiai(results)
    assert scores[3] == pytest.approx(1.0) and scores[2] == 0.0
    assert scores[1] == pytest.approx(1 / 3**0.5)
    assert max(scores, key=scores.get) == 3


def test_quotes_are_made_unique_by_adding_lines_above():
    response = "    if a:\n        return 1\n    if b:\n        return 1\n"
    assert unique_quote(response, 0, 4) == "if b:\n        return 1"
    assert response.count(unique_quote(response, 0, 4)) == 1


def test_tests_without_assertions_are_a_sandbox_error():
    p = problem(2)
    fb = CRITIC.critique(dict(row(p), tests="def check(candidate):\n    assert True\n"))
    assert fb.status == "sandbox_error" and "no assertion" in fb.error
