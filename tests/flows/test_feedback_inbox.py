"""The feedback inbox: the sensor announces each new file content once (seen-set in a file), and `reannotate`
appends pending files to the feedback dataset as new versions and annotates just the new items."""

from __future__ import annotations

import json

import pytest

from t2g_core.config import PipelineConfig

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.slow]  # the harness serves a Prefect API


def _write_feedback(path, ids, seed=5):
    from t2g_core.demo import make_demo_feedback

    df = make_demo_feedback("summarization", len(ids), seed=seed)
    df["id"] = ids
    df.to_json(path, orient="records", lines=True)


def test_sensor_announces_each_new_content_once(tmp_path):
    from flows.feedback import feedback_sensor

    ws = PipelineConfig.model_validate({"workspace": {"root": str(tmp_path)}}).workspace
    (tmp_path / "inbox").mkdir()
    _write_feedback(tmp_path / "inbox" / "a.jsonl", ["a0", "a1"])
    first = feedback_sensor(ws)
    assert len(first) == 1
    (tmp_path / "inbox" / "a-copy.jsonl").write_bytes((tmp_path / "inbox" / "a.jsonl").read_bytes())  # same content
    _write_feedback(tmp_path / "inbox" / "b.jsonl", ["b0"], seed=6)
    second = feedback_sensor(ws)
    assert len(second) == 1 and second != first
    seen = json.loads((tmp_path / "artifacts" / "inbox" / "seen.json").read_text())
    assert set(seen) == {*first, *second}
    assert len(list((tmp_path / "artifacts" / "inbox" / "landed").iterdir())) == 2


@pytest.mark.slow
def test_reannotate_appends_a_version_and_annotates_only_new_items(tmp_path):
    from flows.feedback import feedback_sensor, reannotate
    from t2g_core.datasets import latest_annotations, latest_feedback
    from t2g_core.store import read_artifact

    config = PipelineConfig.model_validate({"workspace": {"root": str(tmp_path)}})
    (tmp_path / "inbox").mkdir()
    _write_feedback(tmp_path / "inbox" / "one.jsonl", ["n0", "n1", "n2"])
    feedback_sensor(config.workspace)
    out = reannotate(config)
    assert [v["version"] for v in out["processed"]] == [1]
    _write_feedback(tmp_path / "inbox" / "two.jsonl", ["n2", "n3"], seed=8)  # n2 is already in the dataset
    feedback_sensor(config.workspace)
    out = reannotate(config)
    assert [v["version"] for v in out["processed"]] == [2]
    assert latest_feedback(config.workspace).n_rows == 4
    annotations = read_artifact(latest_annotations(config.workspace).path, "annotations")
    assert sorted(annotations["id"]) == ["n0", "n1", "n2", "n3"]
    assert reannotate(config)["processed"] == []  # nothing pending any more
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("text2grad").experiment_id])
    assert runs and [r.info.run_name for r in runs if r.info.status == "RUNNING"] == []  # every run it opened is closed


@pytest.mark.slow
def test_a_rejected_inbox_file_is_set_aside_with_its_reason_and_the_files_behind_it_land(tmp_path):
    """A JSONL line nested 100,000 deep is refused by the feedback reader: that file is recorded as rejected with the
    reason and the good file behind it is appended and annotated in the same run, which completes (before: every later
    run failed on it, and the good file was never processed)."""
    from flows.feedback import feedback_sensor, reannotate
    from t2g_core.datasets import latest_annotations
    from t2g_core.store import read_artifact

    config = PipelineConfig.model_validate({"workspace": {"root": str(tmp_path)}})
    (tmp_path / "inbox").mkdir()
    (tmp_path / "inbox" / "a-deep.jsonl").write_text('{"id": "d", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    _write_feedback(tmp_path / "inbox" / "b-good.jsonl", ["g0", "g1"])
    assert len(feedback_sensor(config.workspace)) == 2
    out = reannotate(config)
    assert [v["version"] for v in out["processed"]] == [1]
    assert sorted(read_artifact(latest_annotations(config.workspace).path, "annotations")["id"]) == ["g0", "g1"]
    ledger = json.loads((tmp_path / "artifacts" / "inbox" / "processed.json").read_text())
    rejected = [status for status in ledger.values() if status.startswith("rejected: ")]
    assert len(rejected) == 1 and "line 1 nests arrays or objects too deeply to read" in rejected[0]
    assert reannotate(config)["processed"] == []  # and it blocks no later run


@pytest.mark.slow
def test_reannotation_after_a_pipeline_run_extends_the_pipelines_annotations(tmp_path):
    """The pipeline's annotated feedback is version 1 of both datasets, so the first inbox file extends *them*
    (before: the pipeline set no annotations pointer and the merged annotations held only the new items)."""
    from flows.feedback import feedback_sensor, reannotate
    from flows.stages import annotate
    from t2g_core.config.stages import FeedbackSettings
    from t2g_core.datasets import latest_annotations, latest_feedback
    from t2g_core.stages import feedback as feedback_stage
    from t2g_core.stages.context import StageContext
    from t2g_core.stages.refs import SourceRef
    from t2g_core.store import read_artifact

    config = PipelineConfig.model_validate(
        {"workspace": {"root": str(tmp_path)}, "data": {"n_items": 12}, "checks": {"small_tagger_data": True}}
    )
    settings = FeedbackSettings.from_pipeline(config)
    fb = feedback_stage.materialise(SourceRef.of(config.data), settings, StageContext.keyed(tmp_path, "pipeline"))
    annotate(config, fb)  # the pipeline's annotation stage group
    assert latest_feedback(config.workspace).sha256 == fb.sha256
    _write_feedback(tmp_path / "inbox" / "new.jsonl", ["new-0", "new-1", "new-2"], seed=9)
    feedback_sensor(config.workspace)
    out = reannotate(config)
    assert [v["version"] for v in out["processed"]] == [2]
    latest = latest_feedback(config.workspace)
    annotations = read_artifact(latest_annotations(config.workspace).path, "annotations")
    assert latest.n_rows == 15 and len(annotations) == 15
    assert set(annotations["id"]) == set(read_artifact(latest.path, "feedback")["id"])


def test_demo_files_of_other_seeds_add_new_items():
    from t2g_core.demo import make_demo_feedback

    zero, three = make_demo_feedback("summarization", 4, seed=0), make_demo_feedback("summarization", 4, seed=3)
    assert list(zero["id"]) == [f"sum-{i:05d}" for i in range(4)]  # seed 0 keeps its ids
    assert not set(zero["id"]) & set(three["id"])


def test_the_inbox_watch_announces_only_when_a_new_file_has_settled(tmp_path, monkeypatch):
    """No scan (and no flow run) while the inbox is unchanged; a new file is announced once, after its listing held
    still for one interval."""
    import threading
    import time

    import flows.feedback as feedback

    ws = PipelineConfig.model_validate({"workspace": {"root": str(tmp_path)}}).workspace
    (tmp_path / "inbox").mkdir()
    calls: list[float] = []
    monkeypatch.setattr(feedback, "announce", lambda workspace, folder: calls.append(time.monotonic()) or [])
    stop = threading.Event()
    watcher = threading.Thread(target=feedback.watch_inbox, args=(ws, 0.2, stop), kwargs={"log": lambda _m: None})
    watcher.start()
    try:
        time.sleep(1.5)
        quiet = len(calls)  # the empty inbox, settled once
        time.sleep(1.0)
        assert len(calls) == quiet <= 1
        _write_feedback(tmp_path / "inbox" / "new.jsonl", ["w0"])
        deadline = time.monotonic() + 10
        while len(calls) == quiet and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(calls) == quiet + 1
        time.sleep(1.0)
        assert len(calls) == quiet + 1  # unchanged since: nothing more
    finally:
        stop.set()
        watcher.join(timeout=10)


def test_latest_source_reads_the_dataset_pointer_and_its_covering_annotations(tmp_path):
    from t2g_core.datasets import advance_versions, annotations_covering, latest_version
    from t2g_core.store import ArtifactStore, artifact_key

    ws = PipelineConfig.model_validate({"workspace": {"root": str(tmp_path)}}).workspace
    with pytest.raises(FileNotFoundError, match="data.source=latest: the workspace .* has no feedback dataset version"):
        latest_version(ws)
    from t2g_core.demo import make_demo_feedback

    store = ArtifactStore(tmp_path / "artifacts")
    feedback = store.write("feedback", artifact_key("f", {"n": 2}), make_demo_feedback("summarization", 2), "feedback")
    other = store.write("feedback", artifact_key("f", {"n": 3}), make_demo_feedback("summarization", 3), "feedback")
    advance_versions(ws, feedback, other)  # any artifact stands in for the annotations here
    assert latest_version(ws).sha256 == feedback.sha256
    assert annotations_covering(ws, feedback).sha256 == other.sha256
    assert annotations_covering(ws, other) is None
