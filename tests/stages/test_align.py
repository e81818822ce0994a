"""The alignment stage: the spans artifact under the stage key with its metrics beside it, token metrics under the
policy's tokenizer when one is given; the key follows the align settings and the annotations' content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t2g_core.config import AlignConfig
from t2g_core.config.stages import AlignSettings
from t2g_core.stages import align
from t2g_core.store import MANIFEST, read_artifact
from t2g_core.workspace import Workspace
from tests.core import _tokenizers
from tests.core._align_frames import annotations_frame, feedback_frame


@pytest.fixture
def inputs(tmp_path):
    store = Workspace.at(tmp_path / "ws").store
    return (
        store.write("feedback", "fb", feedback_frame(), "feedback"),
        store.write("annotations", "ann", annotations_frame(), "annotations"),
    )


def test_align_writes_spans_and_their_metrics(inputs, stage_ctx):
    fb, ann = inputs
    settings = AlignSettings()
    ctx = stage_ctx("align", feedback=fb, annotations=ann, tokenizer=None, settings=settings)
    ref = align.align(fb, ann, None, settings, ctx)
    assert ref.path == str(ctx.workspace.artifacts / "spans" / ctx.key) and ref.n_rows == 4
    spans = read_artifact(ref.path, "spans")
    assert list(spans["match"]) == ["exact", "normalized", "unmatched", "normalized"]
    metrics = json.loads((Path(ref.path) / MANIFEST).read_text())["extra"]["metrics"]
    assert metrics["unmatched_rate"] == pytest.approx(0.25) and "labelled_token_frac" not in metrics
    assert ctx.tracker.inputs == [("annotations", "annotation")] and ctx.tracker.outputs == ["spans"]
    assert ctx.tracker.metrics[0][1]["align.unmatched_rate"] == pytest.approx(0.25)


def test_a_tokenizer_adds_the_labelled_token_metrics(inputs, stage_ctx, tmp_path):
    fb, ann = inputs
    _tokenizers.byte_level_bpe().save_pretrained(tmp_path / "tok")
    tok = str(tmp_path / "tok")
    ctx = stage_ctx("align", feedback=fb, annotations=ann, tokenizer=tok, settings=AlignSettings())
    metrics = json.loads((Path(align.align(fb, ann, tok, AlignSettings(), ctx).path) / MANIFEST).read_text())
    assert 0 < metrics["extra"]["metrics"]["labelled_token_frac"] < 1


def test_the_key_follows_the_align_settings_and_the_annotations(inputs, key_of, tmp_path):
    fb, ann = inputs
    strict = AlignSettings(align=AlignConfig(fuzzy_threshold=95.0))
    key = key_of("align", feedback=fb, annotations=ann, tokenizer=None, settings=AlignSettings())
    assert key == key_of("align", feedback=fb, annotations=ann, tokenizer=None, settings=AlignSettings())
    assert key != key_of("align", feedback=fb, annotations=ann, tokenizer=None, settings=strict)
    other = Workspace.at(tmp_path / "ws").store.write(
        "annotations", "other", annotations_frame(annotator="llm"), "annotations"
    )
    assert key != key_of("align", feedback=fb, annotations=other, tokenizer=None, settings=AlignSettings())


def test_a_changed_setting_changes_the_key_and_the_spans(inputs, stage_ctx, tmp_path):
    """``fuzzy_threshold`` decides whether a misspelt quote is placed: a stricter one leaves it unmatched."""
    fb, _ = inputs
    typo = annotations_frame()
    typo.at[0, "good_spans"] = ["works as a nurze"]
    ann = Workspace.at(tmp_path / "ws").store.write("annotations", "typo", typo, "annotations")
    placed, keys = {}, set()
    for threshold in (85.0, 99.0):
        settings = AlignSettings(align=AlignConfig(fuzzy_threshold=threshold))
        ctx = stage_ctx("align", feedback=fb, annotations=ann, tokenizer=None, settings=settings)
        keys.add(ctx.key)
        placed[threshold] = read_artifact(align.align(fb, ann, None, settings, ctx).path, "spans")["match"].tolist()
    assert len(keys) == 2
    assert (placed[85.0][0], placed[99.0][0]) == ("fuzzy", "unmatched") and placed[85.0][1:] == placed[99.0][1:]
