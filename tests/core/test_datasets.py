"""The dataset versions (``t2g_core.datasets``) and the inbox's ledgers (``t2g_core.inbox``) are workspace state, read
and written without Prefect; the files a workspace of an earlier version holds are read as they are."""

from __future__ import annotations

import hashlib
import json
import os

from t2g_core import datasets
from t2g_core.config import WorkspaceConfig
from t2g_core.inbox import LANDED_DIR, PROCESSED_FILE, SEEN_FILE, mark_processed, pending_files, scan
from t2g_core.store import ArtifactRef


def _ref(sha: str, schema: str = "feedback") -> ArtifactRef:
    return ArtifactRef(path=f"/ws/artifacts/{schema}/{sha}", sha256=sha, n_rows=3, schema=schema, key=sha)


def test_the_two_pointer_files_of_an_earlier_workspace_are_read_and_the_next_version_follows_them(tmp_path):
    ws = WorkspaceConfig(root=str(tmp_path))
    for name, sha, extra in (("feedback", "f4", {"version": 4}), ("annotations", "a4", {"feedback_sha256": "f4"})):
        (tmp_path / "artifacts" / name).mkdir(parents=True)
        (tmp_path / "artifacts" / name / "LATEST.json").write_text(json.dumps(_ref(sha, name).to_dict() | extra))
    current = datasets.latest_feedback(ws)
    assert datasets.version_of(ws) == 4 and current.sha256 == "f4" and datasets.latest_annotations(ws).sha256 == "a4"
    assert datasets.annotations_covering(ws, current).sha256 == "a4"
    assert datasets.described(ws, current) == "feedback version 4 (3 rows)"
    assert datasets.advance_versions(ws, _ref("f5"), _ref("a5", "annotations"), based_on=current) == 5
    assert json.loads((tmp_path / "artifacts" / "DATASETS.json").read_text())["version"] == 5


def test_the_pointer_file_as_the_pipeline_writes_it_is_read(tmp_path):
    ws = WorkspaceConfig(root=str(tmp_path))
    (tmp_path / "artifacts").mkdir()
    pointers = {
        "version": 2,
        "feedback": _ref("f2").to_dict(),
        "annotations": _ref("a2", "annotations").to_dict(),
        "annotations_cover": "f2",
    }
    (tmp_path / "artifacts" / "DATASETS.json").write_text(json.dumps(pointers, indent=2))
    assert datasets.latest_version(ws) == _ref("f2") and datasets.annotations_covering(ws, _ref("f2")) is not None
    assert datasets.record_first_versions(ws, _ref("other"), _ref("a-other", "annotations")) == 2  # not the first
    assert datasets.record_first_versions(ws, _ref("f2"), _ref("a2b", "annotations")) == 2  # the same content
    assert datasets.latest_annotations(ws).sha256 == "a2b"


def _line(item: str) -> bytes:
    return json.dumps({"id": item, "task": "qa", "prompt": "p", "response": "r"}).encode() + b"\n"


def test_the_inbox_ledgers_an_earlier_scan_left_are_taken_over_once(tmp_path):
    """An earlier version kept them in the drop folder (``.seen.json``, ``.processed.json``, ``.landed/``): they move
    to ``artifacts/inbox`` on first use, names, order and modes kept; the old names are never read again."""
    ws = WorkspaceConfig(root=str(tmp_path / "ws"))
    inbox, seen_line = tmp_path / "ws" / "inbox", _line("seen")
    state = tmp_path / "ws" / "artifacts" / "inbox"
    (inbox / f".{LANDED_DIR}").mkdir(parents=True)
    for name in ("aaa.jsonl", "bbb.jsonl"):
        (inbox / f".{LANDED_DIR}" / name).write_bytes(_line(name))
    (inbox / f".{LANDED_DIR}" / "bbb.jsonl").chmod(0o640)
    os.utime(inbox / f".{LANDED_DIR}" / "bbb.jsonl", (1, 1))  # the oldest: first in line
    (inbox / f".{PROCESSED_FILE}").write_text(json.dumps({"aaa.jsonl": "feedback version 1"}))
    (inbox / f".{SEEN_FILE}").write_text(json.dumps({hashlib.sha256(seen_line).hexdigest(): "/old/name.jsonl"}))
    (inbox / "renamed.jsonl").write_bytes(seen_line)  # content seen before, under another name
    (inbox / "new.jsonl").write_bytes(_line("new"))
    (inbox / "link.jsonl").symlink_to(inbox / "new.jsonl")
    refused: list[str] = []
    found = scan(str(inbox), ws, refused.append)
    assert [f["source"] for f in found] == [str(inbox / "new.jsonl")]
    assert len(refused) == 1 and "link.jsonl: a symbolic link" in refused[0]
    assert pending_files(ws, refused.append) == [str(state / LANDED_DIR / "bbb.jsonl"), found[0]["path"]]
    assert (state / LANDED_DIR / "bbb.jsonl").stat().st_mode & 0o777 == 0o640
    (inbox / f".{PROCESSED_FILE}").unlink()
    os.mkfifo(inbox / f".{PROCESSED_FILE}")  # planted after the take-over: never opened
    mark_processed(found[0]["path"], 2, ws)
    assert pending_files(ws, refused.append) == [str(state / LANDED_DIR / "bbb.jsonl")]
    ledger = json.loads((state / PROCESSED_FILE).read_text())
    assert ledger == {"aaa.jsonl": "feedback version 1", os.path.basename(found[0]["path"]): "feedback version 2"}
    assert len(json.loads((state / SEEN_FILE).read_text())) == 2 and len(refused) == 1
