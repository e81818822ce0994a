"""Artifact store: validation on write and read, key-addressed immutable folders, atomic writes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from t2g_core.schemas import SchemaError
from t2g_core.store import ArtifactStore, artifact_key, read_artifact, sha256_file, write_parquet


def _feedback(n: int = 3) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": [f"i{i}" for i in range(n)],
            "task": ["summarization"] * n,
            "prompt": [f"post {i}" for i in range(n)],
            "response": [f"summary {i}" for i in range(n)],
            "critique": [None] * n,
            "reference": ["ref"] * n,
            "tests": [None] * n,
            "entry_point": [None] * n,
            "meta": ['{"facts": {}}'] * n,
        }
    )


def _spans() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": ["a", "a", "b"],
            "span_index": [0, 1, 0],
            "label": ["positive", "negative", "negative"],
            "text": ["x", "y", "zz"],
            "start": [0, None, 3],
            "end": [1, None, 5],
            "match": ["exact", "unmatched", "fuzzy"],
            "score": [100.0, 0.0, 91.5],
        }
    )


def test_key_depends_on_stage_config_and_inputs_only():
    k = artifact_key("align", {"t": 85}, {"feedback": "abc"})
    assert k == artifact_key("align", {"t": 85}, {"feedback": "abc"})
    assert k != artifact_key("align", {"t": 80}, {"feedback": "abc"})
    assert k != artifact_key("align", {"t": 85}, {"feedback": "abd"})
    assert k != artifact_key("annotate", {"t": 85}, {"feedback": "abc"})


def test_write_then_read_round_trips_and_is_immutable(tmp_path):
    store = ArtifactStore(tmp_path)
    ref = store.write("spans", "k1", _spans(), "spans")
    assert ref.n_rows == 3 and ref.sha256 == sha256_file(ref.data_path)
    back = read_artifact(ref, "spans")
    assert back["start"].tolist()[1] is None or pd.isna(back["start"].tolist()[1])
    assert back["text"].tolist() == ["x", "y", "zz"]
    # a second write with the same key returns the existing artifact untouched
    other = _spans().assign(text=["changed", "y", "zz"])
    again = store.write("spans", "k1", other, "spans")
    assert again.sha256 == ref.sha256
    assert read_artifact(again, "spans")["text"].tolist()[0] == "x"
    assert store.find("spans", "missing") is None


def test_list_columns_round_trip(tmp_path):
    df = pd.DataFrame(
        {
            "id": ["a"],
            "annotator": ["reference"],
            "critique": ["c"],
            "good_spans": [["g1", "g2"]],
            "poor_spans": [[]],
            "reasoning": [None],
            "status": ["ok"],
            "error": [None],
            "raw": [None],
            "prompt_tokens": [0],
            "completion_tokens": [0],
            "latency_s": [0.0],
        }
    )
    ref = ArtifactStore(tmp_path).write("annotations", "k", df, "annotations")
    back = read_artifact(ref.path, "annotations")
    assert back["good_spans"].tolist() == [["g1", "g2"]] and back["poor_spans"].tolist() == [[]]
    assert back["missing"].tolist() == [[]] and back["missing_at"].tolist() == [[]]  # columns added later: defaults


def test_rows_without_a_later_column_read_with_its_default(tmp_path):
    """A frame where some rows come from a producer that sets a later column (the critics' missing items) and some
    from one that does not (null there): those rows read with the column's default, and the content hash sees it."""
    rows = [
        {
            "id": "a",
            "annotator": "code",
            "critique": "c",
            "good_spans": [],
            "poor_spans": ["x"],
            "status": "ok",
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "latency_s": 0.0,
            "missing": ["y"],
            "missing_at": [3],
        },
        {
            "id": "b",
            "annotator": "code",
            "critique": None,
            "good_spans": [],
            "poor_spans": [],
            "status": "sandbox_error",
            "error": "e",
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "latency_s": 0.0,
        },
    ]
    frame = pd.DataFrame(rows).assign(reasoning=None, raw=None)
    ref = ArtifactStore(tmp_path).write("annotations", "k", frame, "annotations")
    back = read_artifact(ref.path, "annotations")
    assert back["missing"].tolist() == [["y"], []] and back["missing_at"].tolist() == [[3], []]


def test_invalid_frame_is_refused_and_nothing_is_written(tmp_path):
    store = ArtifactStore(tmp_path)
    bad = _spans().assign(label=["positive", "neutral", "negative"])
    with pytest.raises(SchemaError) as exc:
        store.write("spans", "k2", bad, "spans")
    assert exc.value.row == 1 and exc.value.column == "label"
    assert store.find("spans", "k2") is None
    assert not any((tmp_path / "spans").iterdir())


@pytest.mark.slow  # a fresh interpreter killed mid-write
def test_crash_mid_write_leaves_no_readable_artifact(tmp_path):
    """Kill the writer between the data file and the manifest: nothing complete may be visible."""
    script = textwrap.dedent(
        f"""
        import os, pandas as pd
        import t2g_core.store as store
        from tests.core.test_store import _spans
        def die(tmp):
            os._exit(9)  # the process dies after data.parquet was written, before the manifest
        store.ArtifactStore({str(tmp_path)!r}).write("spans", "k3", _spans(), "spans", add_files=die)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    store = ArtifactStore(tmp_path)
    assert store.find("spans", "k3") is None
    assert not (tmp_path / "spans" / "k3").exists()
    leftovers = list((tmp_path / "spans").iterdir())
    assert all(p.name.startswith(".") for p in leftovers)  # only a hidden temp folder, never the key
    with pytest.raises(SchemaError, match="not a complete artifact"):
        read_artifact(leftovers[0], "spans")
    # the next write of the same key succeeds
    assert store.write("spans", "k3", _spans(), "spans").n_rows == 3


def test_write_parquet_is_atomic_on_validation_failure(tmp_path):
    path = tmp_path / "f.parquet"
    write_parquet(_feedback(), path, "feedback")
    before = sha256_file(path)
    with pytest.raises(SchemaError):
        write_parquet(_feedback().assign(task="poetry"), path, "feedback")
    assert sha256_file(path) == before
    assert [p.name for p in tmp_path.iterdir()] == ["f.parquet"]


def _annotations(latency: float, critique: str = "fine") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": ["a", "b"],
            "annotator": ["llm:m", "llm:m"],
            "critique": [critique, None],
            "good_spans": [["x"], []],
            "poor_spans": [[], ["y z"]],
            "reasoning": [None, None],
            "status": ["ok", "api_error"],
            "error": [None, "HTTP 500: boom"],
            "raw": ["{}", None],
            "prompt_tokens": [10, 0],
            "completion_tokens": [5, 0],
            "latency_s": [latency, latency / 2],
        }
    )


def test_annotations_differing_only_in_latency_give_the_same_downstream_key(tmp_path):
    """Wall-clock ``latency_s`` is a measurement, not content: before, a harmless setting change (concurrency) that
    changed only timings gave the annotations a new hash and re-ran every later stage."""
    from t2g_core.stages.context import stage_key, write_file
    from t2g_core.store import ArtifactRef

    fast, slow, other = _annotations(0.25), _annotations(7.5), _annotations(0.25, critique="wrong")
    refs = {
        "store": [
            ArtifactStore(tmp_path / n).write("annotations", "k", df, "annotations")
            for n, df in (("s1", fast), ("s2", slow), ("s3", other))
        ],
        "file": [
            write_file(df, tmp_path / f"{n}.parquet", "annotations")
            for n, df in (("f1", fast), ("f2", slow), ("f3", other))
        ],
    }
    refs["path"] = [ArtifactRef.of(r.path, "annotations") for r in refs["file"]]
    for how, (a, b, c) in refs.items():
        assert a.sha256 != b.sha256, how  # the files differ
        keys = [stage_key("align", "code", {"annotations": r}) for r in (a, b, c)]
        assert keys[0] == keys[1] != keys[2], how  # the content does not, unless a critique changes
        assert stage_key("align", "code", {"annotations": a.to_dict()}) == keys[0], how  # as a plain dict too
    feedback = ArtifactStore(tmp_path / "fb").write("feedback", "k", _feedback(), "feedback")
    assert feedback.content_sha256 is None and feedback.fingerprint() == {"sha256": feedback.sha256}
