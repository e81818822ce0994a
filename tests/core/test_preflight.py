"""Before anything is annotated or built, every row must have what the chosen annotator needs: one message naming
the rows and the annotator that fits, never ten items failing one by one as sandbox errors."""

from __future__ import annotations

import pytest

from t2g_core.config.annotate import AnnotateConfig
from t2g_core.critics.reference import ReferenceCritic
from t2g_core.demo import make_demo_feedback
from t2g_core.demo.critiques import make_human_feedback
from t2g_core.stages.preflight import PreflightError, check


def test_rows_with_critiques_and_no_references_are_sent_to_the_grounding_annotator():
    rows = make_human_feedback(10, seed=3)
    with pytest.raises(PreflightError) as err:
        check(rows, AnnotateConfig(annotator="reference"))
    message = str(err.value)
    assert "annotate.annotator=reference needs a reference on every row, and 10 of 10 rows have none" in message
    assert "'sum-s3-00000', 'sum-s3-00001'" in message and "..." in message  # the first ids, then how many
    assert "Your rows carry critiques and no references or tests: use annotate.annotator=ground" in message
    check(rows, AnnotateConfig(annotator="ground"))  # and that one fits


def test_each_annotator_names_what_it_reads():
    demo = make_demo_feedback("summarization", 8, seed=0)  # references, no critiques
    check(demo, AnnotateConfig(annotator="reference"))
    with pytest.raises(PreflightError, match=r"annotator=ground needs a critique .* use annotate.annotator=reference"):
        check(demo, AnnotateConfig(annotator="ground"))
    with pytest.raises(PreflightError, match=r"annotate.mode=grounding needs a critique"):
        check(demo, AnnotateConfig(annotator="llm", mode="grounding", base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(PreflightError, match=r"row 0 \(id 'sum-00000'\), column 'task': the code critic handles code"):
        check(demo, AnnotateConfig(annotator="code"))
    no_tests = demo.assign(task="code", reference=None)
    with pytest.raises(PreflightError, match=r"needs an entry_point and tests|needs tests and an entry_point"):
        check(no_tests, AnnotateConfig(annotator="code"))


def test_the_llm_annotator_needs_an_endpoint_and_a_key_unless_it_is_local():
    demo = make_demo_feedback("summarization", 4, seed=0)
    with pytest.raises(PreflightError, match="set annotate.base_url"):
        check(demo, AnnotateConfig(annotator="llm"))
    hosted = AnnotateConfig(annotator="llm", base_url="https://api.example.com/v1", api_key_env="MY_KEY")
    with pytest.raises(PreflightError, match=r"needs an API key for https://api.example.com/v1: set \$MY_KEY"):
        check(demo, hosted, has_key=False)
    check(demo, hosted, has_key=True)
    check(demo, hosted)  # unknown here (a Prefect Secret block may hold it): not refused
    check(demo, AnnotateConfig(annotator="llm", base_url="http://127.0.0.1:8000/v1"), has_key=False)


def test_a_few_rows_without_inputs_go_on_within_the_failure_rate_with_a_clear_status():
    demo = make_demo_feedback("summarization", 40, seed=0)
    demo.loc[0, "reference"] = None  # 1 of 40 = 2.5% <= max_failure_rate 5%
    check(demo, AnnotateConfig(annotator="reference"))
    with pytest.raises(PreflightError, match="1 of 40 rows"):
        check(demo, AnnotateConfig(annotator="reference", max_failure_rate=0.0))
    fb = ReferenceCritic().critique({**demo.iloc[0].to_dict(), "meta": {}})
    assert fb.status == "missing_input" and "no reference to compare with" in fb.error


def test_a_stage_that_fails_too_many_items_says_why_once_per_status(tmp_path):
    from t2g_core.annotators import annotate
    from t2g_core.stages.labelling import TooManyFailures, check_failure_rate
    from t2g_core.stages.refs import ArtifactRef

    demo = make_demo_feedback("summarization", 4, seed=0).assign(reference=None)
    run = annotate(demo, AnnotateConfig(annotator="reference"), progress=False)  # the critic alone, no preflight
    assert set(run.frame["status"]) == {"missing_input"}
    ref = ArtifactRef(path=str(tmp_path / "a"), sha256="0" * 64, n_rows=4, schema="annotations", key="k")
    with pytest.raises(TooManyFailures) as err:
        check_failure_rate(ref, run.stats, 0.05)
    message = str(err.value)
    assert "4 of 4 items failed (missing_input: 4)" in message
    assert message.count("has no reference to compare with") == 1 and "sum-00000" in message
