"""The annotation stage: one annotations row per feedback item under the stage key, its statistics tracked; the LLM
annotator sends the key it is handed and caches answers in the workspace; too many failures stop the stage after
every row was written; ``unannotated`` and ``merge`` serve the dataset's versions."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from t2g_core.config import AnnotateConfig
from t2g_core.config.stages import AnnotateSettings
from t2g_core.stages import annotate
from t2g_core.stages.labelling import TooManyFailures
from t2g_core.store import MANIFEST, read_artifact
from t2g_core.testing import FakeOpenAIServer
from t2g_core.workspace import Workspace


def test_reference_critic_annotates_every_item(demo_feedback, stage_ctx):
    fb = demo_feedback(6)
    settings = AnnotateSettings(annotate=AnnotateConfig(annotator="reference"))
    ctx = stage_ctx("annotate", feedback=fb, settings=settings)
    ref = annotate.annotate(fb, settings, ctx)
    frame = read_artifact(ref.path, "annotations")
    assert ref.path == str(ctx.workspace.artifacts / "annotations" / ctx.key)
    assert frame["id"].tolist() == read_artifact(fb.path, "feedback")["id"].tolist()
    assert set(frame["status"]) == {"ok"} and (frame["annotator"] == "reference").all()
    stats = json.loads((Path(ref.path) / MANIFEST).read_text())["extra"]["stats"]
    assert stats["n_items"] == 6 and stats["status_counts"]["ok"] == 6
    assert ctx.tracker.inputs == [("feedback", "annotation")] and ctx.tracker.outputs == ["annotations"]
    (_, metrics), *_ = ctx.tracker.metrics
    assert metrics["annotate.n_items"] == 6.0 and metrics["annotate.status.ok"] == 6.0


def test_the_key_follows_the_annotator_settings_and_the_feedback(demo_feedback, key_of):
    fb = demo_feedback(6)
    ref_critic = AnnotateSettings(annotate=AnnotateConfig(annotator="reference"))
    same = AnnotateSettings(annotate=AnnotateConfig(annotator="reference"))
    assert key_of("annotate", feedback=fb, settings=ref_critic) == key_of("annotate", feedback=fb, settings=same)
    hotter = AnnotateSettings(annotate=AnnotateConfig(annotator="reference", temperature=0.9))
    assert key_of("annotate", feedback=fb, settings=ref_critic) != key_of("annotate", feedback=fb, settings=hotter)
    assert key_of("annotate", feedback=fb, settings=ref_critic) != key_of(
        "annotate", feedback=demo_feedback(6, seed=1), settings=ref_critic
    )


def _llm(base_url: str, **kw) -> AnnotateSettings:
    return AnnotateSettings(
        annotate=AnnotateConfig(annotator="llm", base_url=base_url, model="m", max_retries=0, concurrency=2, **kw)
    )


def test_the_llm_annotator_sends_the_handed_key_and_answers_again_from_the_workspace_cache(demo_feedback, stage_ctx):
    fb = demo_feedback(4)
    with FakeOpenAIServer(seed=0) as server:
        settings = _llm(server.base_url)
        first = annotate.annotate(fb, settings, stage_ctx("annotate", feedback=fb, settings=settings), api_key="sk-a")
        asked = len(server.auth_headers)
        ctx = stage_ctx("annotate", feedback=fb, settings=settings)
        again = annotate.annotate(fb, settings, ctx, api_key="sk-a")
    assert set(server.auth_headers) == {"Bearer sk-a"} and asked >= 4 and len(server.auth_headers) == asked
    assert (ctx.workspace.root / "cache" / "annotate").is_dir()
    assert again.sha256 == first.sha256
    (_, metrics), *_ = ctx.tracker.metrics
    assert metrics["annotate.cache_hits"] == 4.0 and metrics["annotate.requests"] == 0.0


def test_too_many_failures_stop_the_stage_after_writing_every_row(demo_feedback, stage_ctx):
    fb = demo_feedback(4)
    with FakeOpenAIServer(fault_rate=1.0, faults=("malformed",), seed=1) as server:
        settings = _llm(server.base_url, max_failure_rate=0.25)
        with pytest.raises(TooManyFailures, match="4 of 4 items failed .*parse_error: 4") as exc:
            annotate.annotate(fb, settings, stage_ctx("annotate", feedback=fb, settings=settings))
    frame = read_artifact(exc.value.ref.path, "annotations")
    assert len(frame) == 4 and set(frame["status"]) == {"parse_error"}


def test_unannotated_then_merge_extend_the_annotations(demo_feedback, stage_ctx, tmp_path):
    fb = demo_feedback(5)
    settings = AnnotateSettings(annotate=AnnotateConfig(annotator="reference"))
    store = Workspace.at(tmp_path / "ws").store
    head = store.write("feedback", "head", read_artifact(fb.path, "feedback").head(3), "feedback")
    first = annotate.annotate(head, settings, stage_ctx("annotate", feedback=head, settings=settings))
    todo = annotate.unannotated(fb, first, stage_ctx("annotate", feedback=fb, annotations=first))
    assert read_artifact(todo.path, "feedback")["id"].tolist() == read_artifact(fb.path, "feedback")["id"][3:].tolist()
    delta = annotate.annotate(todo, settings, stage_ctx("annotate", feedback=todo, settings=settings))
    ctx = stage_ctx("annotate", previous=first, delta=delta)
    merged = read_artifact(annotate.merge(first, delta, ctx).path, "annotations")
    assert sorted(merged["id"]) == sorted(read_artifact(fb.path, "feedback")["id"]) and merged["id"].is_unique
    assert ctx.tracker.inputs == [("annotations", "annotation"), ("annotations_delta", "annotation")]
    newer = pd.DataFrame(read_artifact(delta.path, "annotations")).assign(critique="second opinion")
    redo = store.write("annotations", "redo", newer, "annotations")
    again = read_artifact(
        annotate.merge(first, redo, stage_ctx("annotate", previous=first, delta=redo)).path, "annotations"
    )
    assert len(again) == 5 and set(again.set_index("id").loc[newer["id"], "critique"]) == {"second opinion"}
