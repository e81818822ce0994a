"""The Prefect UI review path: the flow publishes the sample as a markdown artifact, pauses for typed input, rejects
invalid input, re-asks when verdicts name items outside the sample, and continues with valid verdicts.

Uses the session-scoped ``prefect_harness`` fixture of tests/flows/conftest.py (temporary database, in-process API).
"""

from __future__ import annotations

import threading
import time

import pytest
from prefect import flow
from prefect.artifacts import Artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.flow_runs import resume_flow_run
from prefect.input.actions import read_flow_run_input
from prefect.input.run_input import keyset_from_paused_state

from flows.review import SAMPLE_ARTIFACT, ReviewInput, ui_review
from t2g_core.config import ValidateConfig
from t2g_core.validation import compute_alignment, gold_by_id, ground_truth_review, make_batch, review_sample
from t2g_core.validation.synthetic import make_synthetic_batch

pytestmark = pytest.mark.slow
FLOW_NAME = "t2g-validate-review-test"


@flow(name=FLOW_NAME)
def review_flow(sample: dict, cfg: dict) -> dict:
    return ui_review(sample, cfg, poll_interval_s=0.3)


def _paused_run(pause_key: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=[FLOW_NAME])),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
                ),
            )
            for run in runs:
                if run.state.state_details.pause_key == pause_key:
                    return run
            time.sleep(0.2)
    raise TimeoutError(f"no flow run paused with key {pause_key}")


def test_run_input_has_the_verdict_fields():
    assert set(ReviewInput.model_fields) == {"reviewer", "sample_key", "items"}
    with pytest.raises(ValueError, match="reviewer"):
        ReviewInput(reviewer="", items=[])


def test_pause_rejects_invalid_input_and_resumes_with_valid_verdicts(prefect_harness):
    s = make_synthetic_batch(n_items=8, flip=0.2, seed=3)
    b = make_batch(s.annotations, s.spans, s.feedback)
    cfg = ValidateConfig(sample_size=3, review="ui", review_timeout_s=120)
    sample = review_sample(b, cfg)
    result: dict = {}
    worker = threading.Thread(
        target=lambda: result.update(out=review_flow(sample.model_dump(mode="json"), cfg.model_dump(mode="json")))
    )
    worker.start()
    try:
        run = _paused_run("span-review-1")
        keys = keyset_from_paused_state(run.state)
        schema = read_flow_run_input(keys["schema"], flow_run_id=run.id)
        assert {"reviewer", "items"} <= set(schema["properties"])
        markdown = Artifact.get(SAMPLE_ARTIFACT).data
        assert all(it.id in markdown for it in sample.items) and "🟥" in markdown and "🟩" in markdown

        with pytest.raises(RuntimeError, match="Cannot resume"):  # the server validates against the schema
            resume_flow_run(run.id, run_input={"reviewer": "bob", "items": "not a list"})
        assert _paused_run("span-review-1").id == run.id

        resume_flow_run(run.id, run_input={"reviewer": "bob", "items": [{"id": "nope-7", "spans": []}]})
        again = _paused_run("span-review-2")  # schema-valid but not in the sample: asked again, with the reason
        description = read_flow_run_input(keyset_from_paused_state(again.state)["description"], flow_run_id=again.id)
        assert again.id == run.id and "nope-7" in description

        verdicts = ground_truth_review(sample, gold_by_id(b))
        resume_flow_run(again.id, run_input=verdicts.model_dump(mode="json"))
        worker.join(timeout=60)
    finally:
        worker.join(timeout=1)
    assert not worker.is_alive()
    assert result["out"] == verdicts.model_dump(mode="json")
    alignment = compute_alignment(sample, type(verdicts).model_validate(result["out"]), cfg)
    assert alignment.overall.judged == sample.n_judgements


def _artifacts(tmp_path, **kw):
    from t2g_core.workspace import Workspace

    s = make_synthetic_batch(n_items=16, **kw)
    ws = Workspace.at(tmp_path / "ws")
    key = "bad" if kw else "good"
    ann = ws.store.write("annotations", key, s.annotations, "annotations")
    spans = ws.store.write("spans", key, s.spans, "spans")
    fb = ws.store.write("feedback", key, s.feedback, "feedback")
    return ws, ann, spans, fb


@flow(name="t2g-validate-auto-test")
def auto_flow(ann, spans, fb, cfg: ValidateConfig, workspace):
    from t2g_core.config.stages import ValidateSettings
    from tasks.validate import auto_review, draw_review_sample, validation_report

    settings = ValidateSettings(validate=cfg)
    sample = draw_review_sample(ann, spans, fb, settings, workspace)
    verdicts = auto_review(sample, ann, spans, fb)
    return validation_report(ann, spans, fb, sample, verdicts, settings, workspace)


def test_auto_review_tasks_report_and_gate(prefect_harness, tmp_path):
    from t2g_core.config import WorkspaceConfig
    from tasks.validate import ValidationGateError

    cfg = ValidateConfig(sample_size=6)
    ws, ann, spans, fb = _artifacts(tmp_path)
    wcfg = WorkspaceConfig(root=str(ws.root))
    out = auto_flow(ann, spans, fb, cfg, wcfg)
    assert out.status == "pass" and "# Validation report: PASS" in open(out.report).read()
    assert Artifact.get("validation-checks") is not None

    import mlflow

    from t2g_mlflow.experiment import tracking_uri

    runs = mlflow.search_runs(search_all_experiments=True, filter_string="tags.`t2g.stage` = 'validate'")
    assert len(runs) == 1 and runs["metrics.validate.unmatched_rate"].iloc[0] == 0.0
    assert mlflow.get_tracking_uri() == tracking_uri(wcfg)

    ws, ann, spans, fb = _artifacts(tmp_path, unmatched=0.4)
    with pytest.raises(ValidationGateError, match="unmatched_rate"):
        auto_flow(ann, spans, fb, cfg, wcfg)
    assert "FAIL" in Artifact.get("validation-report").data


def test_import_verdicts_task_checks_the_file_against_the_sample(tmp_path):
    from t2g_core.review import VerdictError, export_review
    from t2g_core.stages.refs import ReviewSampleRef
    from tasks.validate import import_verdicts

    s = make_synthetic_batch(n_items=8)
    b = make_batch(s.annotations, s.spans, s.feedback)
    sample = review_sample(b, ValidateConfig(sample_size=3))
    paths = export_review(sample, tmp_path)
    verdicts = ground_truth_review(sample, gold_by_id(b))
    good = tmp_path / "v.json"
    good.write_text(verdicts.model_dump_json())
    sample_ref = ReviewSampleRef(key=sample.key, n_items=len(sample.items), sample=str(paths["sample"]))
    assert import_verdicts.fn(sample_ref, str(good)) == verdicts.model_dump(mode="json")
    bad = tmp_path / "bad.json"
    bad.write_text(verdicts.model_copy(update={"sample_key": "other"}).model_dump_json())
    with pytest.raises(VerdictError, match="sample_key 'other'"):
        import_verdicts.fn(sample_ref, str(bad))
