"""The versions of the feedback and annotations datasets that the inbox extends, in one pointer file.

``<workspace>/artifacts/DATASETS.json``: ``{"version": N, "feedback": ArtifactRef, "annotations": ArtifactRef,
"annotations_cover": sha256}``, the first feedback version (``"first"``) and the number every version got
(``"versions": {sha256: N}``, so a version keeps its name, :func:`dataset_name`). Both references are replaced in one
atomic write under the file's one-writer lock, so no version number is reused and the two never disagree. Set by
:func:`record_first_versions`, moved by :func:`advance_versions`. (Older workspaces' two ``LATEST.json`` files are
read when the pointer file is absent.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from t2g_core.config import WorkspaceConfig
from t2g_core.locks import folder_lock
from t2g_core.store import ArtifactRef, read_json, write_text_atomic
from t2g_core.workspace import Workspace, relocated

POINTER = "DATASETS.json"
LEGACY = "LATEST.json"  # the per-dataset pointer of earlier workspaces


class DatasetsMoved(RuntimeError):
    """The datasets moved to another version while a run worked from the previous one; the run is not recorded."""


def _pointer(workspace: WorkspaceConfig) -> Path:
    return Workspace.at(workspace.root).artifacts / POINTER


def _read_pointers(workspace: WorkspaceConfig) -> dict:
    """The pointer file's content ({} when no version exists yet), its paths where the workspace is now."""
    path = _pointer(workspace)
    if path.exists():
        return relocated(read_json(path), workspace.root)
    legacy = {name: path.parent / name / LEGACY for name in ("feedback", "annotations")}
    if not legacy["feedback"].exists():
        return {}
    feedback = read_json(legacy["feedback"])
    annotations = read_json(legacy["annotations"]) if legacy["annotations"].exists() else None
    cover = annotations.get("feedback_sha256") if annotations else None
    return {
        "version": feedback.get("version", 0),
        "feedback": feedback,
        "annotations": annotations,
        "annotations_cover": cover,
    }


def _held(workspace: WorkspaceConfig):
    """The pointer file's one-writer lock (writers wait their turn: an update takes milliseconds)."""
    return folder_lock(_pointer(workspace), f"dataset versions (pid {os.getpid()})", wait_s=120)


def latest(workspace: WorkspaceConfig, dataset: str) -> ArtifactRef | None:
    """The current version of ``dataset`` (``feedback`` or ``annotations``), or None."""
    entry = _read_pointers(workspace).get(dataset)
    return ArtifactRef.model_validate(entry) if entry else None


def latest_version(workspace: WorkspaceConfig) -> ArtifactRef:
    """The feedback dataset's latest version (``data.source: latest``); a clear error when there is none yet."""
    found = latest(workspace, "feedback")
    if found is None:
        raise FileNotFoundError(
            f"data.source=latest: the workspace {workspace.root} has no feedback dataset version yet (a pipeline run "
            "makes version 1; the inbox re-annotation appends the next ones)"
        )
    return found


def annotations_covering(workspace: WorkspaceConfig, feedback: ArtifactRef) -> ArtifactRef | None:
    """The latest annotations when they cover exactly ``feedback`` (what re-annotation left), else None."""
    pointers = _read_pointers(workspace)
    if not pointers.get("annotations") or pointers.get("annotations_cover") != feedback.sha256:
        return None
    return ArtifactRef.model_validate(pointers["annotations"])


def latest_feedback(workspace: WorkspaceConfig) -> ArtifactRef | None:
    return latest(workspace, "feedback")


def latest_annotations(workspace: WorkspaceConfig) -> ArtifactRef | None:
    return latest(workspace, "annotations")


def dataset_name(workspace: WorkspaceConfig | None, ref: ArtifactRef) -> str:
    """The one name of a dataset version wherever it is shown (model descriptions, MLflow run descriptions, the run's
    outcome and summary): ``feedback version 2 (144 rows, sha256 9bbf535400c3)``; content that is no version of the
    workspace's datasets (or shown without a workspace) has no number (``spans (130 rows, sha256 …)``)."""
    versions = _numbers(_read_pointers(workspace)) if workspace is not None else {}
    number = f" version {versions[ref.sha256]}" if ref.sha256 in versions else ""
    return f"{ref.schema_name}{number} ({ref.n_rows} rows, sha256 {ref.sha256[:12]})"


def _numbers(pointers: dict) -> dict[str, int]:
    """sha256 -> version number of every recorded version (the current ones also for a workspace of an earlier
    version, which kept no numbers)."""
    current = {pointers[n]["sha256"]: pointers["version"] for n in ("feedback", "annotations") if pointers.get(n)}
    return pointers.get("versions", {}) | current


def first_version(workspace: WorkspaceConfig) -> ArtifactRef | None:
    """The feedback dataset's first version (None: none recorded, or a workspace of an earlier version)."""
    first = _read_pointers(workspace).get("first")
    return ArtifactRef.model_validate(first) if first else None


def models_feedback(workspace: WorkspaceConfig, feedback: ArtifactRef) -> ArtifactRef:
    """The feedback the tiny models are built from: the dataset's first version when ``feedback`` is one of its
    versions, else ``feedback``. A version only adds items and the byte-level tokenizer encodes any new text, so a new
    inbox batch reuses the models, and the policy before PPO (the evaluation's baseline) stays the same."""
    pointers = _read_pointers(workspace)
    first = pointers.get("first")
    return ArtifactRef.model_validate(first) if first and feedback.sha256 in _numbers(pointers) else feedback


def version_of(workspace: WorkspaceConfig, dataset: str = "feedback") -> int:
    """The current version number (both datasets share it)."""
    return int(_read_pointers(workspace).get("version", 0))


def _advance(workspace: WorkspaceConfig, feedback: ArtifactRef, annotations: ArtifactRef) -> int:
    current = _read_pointers(workspace)
    same = bool(current.get("feedback")) and current["feedback"]["sha256"] == feedback.sha256
    version = int(current.get("version", 0)) + (0 if same else 1)
    pointers = {
        "version": version,
        "feedback": feedback.to_dict(),
        "annotations": annotations.to_dict(),
        "annotations_cover": feedback.sha256,
        "first": current.get("first") or (feedback.to_dict() if version == 1 else None),
        "versions": current.get("versions", {}) | {feedback.sha256: version, annotations.sha256: version},
    }
    write_text_atomic(_pointer(workspace), json.dumps(pointers, indent=2))
    return version


def advance_versions(
    workspace: WorkspaceConfig,
    feedback: ArtifactRef,
    annotations: ArtifactRef,
    based_on: ArtifactRef | None | bool = False,
) -> int:
    """Move both pointers to ``feedback`` and the ``annotations`` covering it; returns the version (a new number only
    when the content changed). ``based_on``: the feedback version the run started from (None: no version); when the
    datasets moved on meanwhile, :class:`DatasetsMoved` is raised and nothing is written (False: no such check)."""
    with _held(workspace):
        if based_on is not False:
            now = latest(workspace, "feedback")
            expected = None if based_on is None else based_on.sha256
            if (now.sha256 if now else None) not in (expected, feedback.sha256):
                raise DatasetsMoved(
                    f"{_pointer(workspace)}: the feedback dataset moved to version {version_of(workspace)} while "
                    "this run worked from the previous one; its files stay pending for the next run"
                )
        return _advance(workspace, feedback, annotations)


def record_first_versions(workspace: WorkspaceConfig, feedback: ArtifactRef, annotations: ArtifactRef) -> int:
    """The pipeline's annotated feedback becomes version 1 of both datasets when the workspace has none yet, and the
    annotations pointer follows when it annotated the current feedback version; returns the feedback version."""
    with _held(workspace):
        current = latest_feedback(workspace)
        if current is None or current.sha256 == feedback.sha256:
            return _advance(workspace, feedback, annotations)
        return version_of(workspace)
