"""The feedback stage: ``materialise`` writes the configured source as a feedback artifact under the stage key;
``append`` adds an inbox file's new items as the next version."""

from __future__ import annotations

import pandas as pd

from t2g_core.config import DataConfig
from t2g_core.config.stages import FeedbackSettings
from t2g_core.stages import feedback
from t2g_core.stages.refs import SourceRef
from t2g_core.store import read_artifact
from t2g_core.workspace import Workspace


def _settings(**data) -> FeedbackSettings:
    return FeedbackSettings(data=DataConfig(**{"task": "summarization", "n_items": 6, "seed": 1} | data))


def test_materialise_writes_the_demo_rows_under_the_stage_key(stage_ctx):
    settings = _settings()
    source = SourceRef.of(settings.data)
    ctx = stage_ctx("feedback", source=source, settings=settings)
    ref = feedback.materialise(source, settings, ctx)
    assert ref.n_rows == 6 and ref.schema_name == "feedback"
    assert ref.path == str(ctx.workspace.artifacts / "feedback" / ctx.key)
    df = read_artifact(ref.path, "feedback")
    assert df["id"].is_unique and set(df["task"]) == {"summarization"}
    assert ctx.tracker.outputs == ["feedback"] and ctx.tracker.metrics == [(None, {"n_items": 6})]
    again = feedback.materialise(source, settings, stage_ctx("feedback", source=source, settings=settings))
    assert again == ref  # the same inputs: the same key, the same content


def test_a_file_source_is_read_and_limited(tmp_path, stage_ctx):
    rows = _settings()
    made = feedback.source_frame(rows.data)
    made.to_json(tmp_path / "fb.jsonl", orient="records", lines=True)
    settings = FeedbackSettings(data=DataConfig(source=str(tmp_path / "fb.jsonl"), limit=4))
    source = SourceRef.of(settings.data)
    assert source.origin == f"file:{tmp_path / 'fb.jsonl'}"
    ref = feedback.materialise(source, settings, stage_ctx("feedback", source=source, settings=settings))
    assert read_artifact(ref.path, "feedback")["id"].tolist() == made["id"].tolist()[:4]


def test_the_key_follows_the_settings_and_the_source_content(key_of, tmp_path):
    a, same, more = _settings(), _settings(), _settings(n_items=7)
    assert key_of("feedback", source=SourceRef.of(a.data), settings=a) == key_of(
        "feedback", source=SourceRef.of(same.data), settings=same
    )
    assert key_of("feedback", source=SourceRef.of(a.data), settings=a) != key_of(
        "feedback", source=SourceRef.of(more.data), settings=more
    )
    path = tmp_path / "fb.jsonl"
    feedback.source_frame(a.data).to_json(path, orient="records", lines=True)
    first = SourceRef.of(DataConfig(source=str(path)))
    feedback.source_frame(more.data).to_json(path, orient="records", lines=True)  # same file, new content
    assert first.fingerprint() != SourceRef.of(DataConfig(source=str(path))).fingerprint()


def test_append_adds_only_new_ids_as_the_next_version(stage_ctx, demo_feedback, tmp_path):
    current = demo_feedback(4)
    old = read_artifact(current.path, "feedback")
    incoming = pd.concat([old.head(2), read_artifact(demo_feedback(3, seed=7).path, "feedback")], ignore_index=True)
    inbox = Workspace.at(tmp_path / "ws").store.write("feedback", "inbox", incoming, "feedback")
    ctx = stage_ctx("feedback", new=inbox, current=current)
    version, delta = feedback.append(inbox, current, ctx)
    assert delta.n_rows == 3 and version.n_rows == 7
    merged = read_artifact(version.path, "feedback")
    assert merged["id"].tolist()[:4] == old["id"].tolist() and merged["id"].is_unique
    assert ctx.tracker.inputs == [("feedback_delta", "annotation")] and ctx.tracker.outputs == ["feedback"]
    assert ctx.tracker.metrics == [(None, {"new_items": 3, "items": 7})]
    nothing_new, empty = feedback.append(current, current, stage_ctx("feedback", new=current, current=current))
    assert empty.n_rows == 0 and nothing_new.sha256 == current.sha256  # re-sent items never duplicate rows
