"""The validation stage: the review sample and its offline page, the programmatic review against ground truth, the
checks and the report under the stage key, and the gate that stops a bad batch naming every failed check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t2g_core.config import ValidateConfig
from t2g_core.config.stages import ValidateSettings
from t2g_core.stages import validate
from t2g_core.validation.synthetic import make_synthetic_batch
from t2g_core.workspace import Workspace


def _batch(tmp_path, key: str, **defects):
    s = make_synthetic_batch(n_items=16, **defects)
    store = Workspace.at(tmp_path / "ws").store
    return (
        store.write("annotations", key, s.annotations, "annotations"),
        store.write("spans", key, s.spans, "spans"),
        store.write("feedback", key, s.feedback, "feedback"),
    )


SETTINGS = ValidateSettings(validate=ValidateConfig(sample_size=6))


def test_sample_review_and_checks_pass_a_good_batch(tmp_path, stage_ctx):
    ann, spans, fb = _batch(tmp_path, "good")
    ctx = stage_ctx("validate", annotations=ann, spans=spans, feedback=fb, settings=SETTINGS)
    sample = validate.draw_sample(ann, spans, fb, SETTINGS, ctx)
    review_dir = ctx.workspace.root / "reports" / "validate" / "review" / ctx.key
    assert sample.n_items == 6 and Path(sample.sample).parent == review_dir
    assert Path(sample.page).is_file() and Path(sample.sheet).is_file()
    verdicts = validate.auto_review(sample, ann, spans, fb)
    assert verdicts is not None and verdicts["sample_key"] == sample.key
    ref = validate.check(ann, spans, fb, sample, verdicts, SETTINGS, ctx, verdict_source="ground-truth")
    assert ref.status == "pass" and Path(ref.report).parent == ctx.workspace.root / "reports" / "validate" / ctx.key
    report = json.loads(Path(ref.json_path).read_text())
    assert report["alignment"]["reviewer"] == "ground-truth" and Path(ref.chart).is_file()
    logged = {k for _, m in ctx.tracker.metrics for k in m}
    assert {"validate.unmatched_rate", "validate.alignment", "validate.alignment_low"} <= logged
    assert ctx.tracker.inputs == [("annotations", "annotation")] and ctx.tracker.artifacts == [Path(ref.report).parent]
    validate.gate(ref)  # a passed report stops nothing


def test_a_bad_batch_fails_and_the_gate_names_the_failed_check(tmp_path, stage_ctx):
    ann, spans, fb = _batch(tmp_path, "bad", unmatched=0.4)
    ctx = stage_ctx("validate", annotations=ann, spans=spans, feedback=fb, settings=SETTINGS)
    ref = validate.check(ann, spans, fb, None, None, SETTINGS, ctx)
    assert ref.status == "fail"
    with pytest.raises(validate.ValidationGateError, match="unmatched_rate") as exc:
        validate.gate(ref)
    assert ref.report in str(exc.value)


def test_without_verdicts_a_review_is_pending_and_without_gold_auto_review_is_skipped(tmp_path, stage_ctx):
    ann, spans, fb = _batch(tmp_path, "good")
    offline = ValidateSettings(validate=ValidateConfig(review="offline"))
    ctx = stage_ctx("validate", annotations=ann, spans=spans, feedback=fb, settings=offline)
    assert validate.check(ann, spans, fb, None, None, offline, ctx).status == "pending"
    sample = validate.draw_sample(ann, spans, None, SETTINGS, stage_ctx("validate", annotations=ann, spans=spans))
    assert validate.auto_review(sample, ann, spans, fb) is not None
    no_gold = Workspace.at(tmp_path / "ws").store.write(
        "feedback", "no-gold", make_synthetic_batch(n_items=16).feedback.assign(meta=None), "feedback"
    )
    assert validate.auto_review(sample, ann, spans, no_gold) is None


def test_the_key_follows_the_validate_settings_and_the_inputs(tmp_path, key_of):
    ann, spans, fb = _batch(tmp_path, "good")
    bad_ann, _, _ = _batch(tmp_path, "bad", flip=0.3)

    def key(settings, annotations=ann):
        return key_of("validate", annotations=annotations, spans=spans, feedback=fb, settings=settings)

    assert key(SETTINGS) == key(ValidateSettings(validate=ValidateConfig(sample_size=6)))
    assert key(SETTINGS) != key(ValidateSettings(validate=ValidateConfig(sample_size=7)))
    assert key(SETTINGS) != key(SETTINGS, annotations=bad_ann)
