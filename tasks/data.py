"""Data tasks: materialise the feedback artifact, build the tiny demo models, version the feedback dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from prefect import task

from t2g_core.config import DataConfig, ModelsConfig, WorkspaceConfig
from tasks import tracking
from tasks.caching import forced, stage_task_options

if TYPE_CHECKING:
    import pandas as pd

LATEST = "LATEST.json"  # <workspace>/artifacts/feedback/LATEST.json: the current version of the feedback dataset


def _workspace(cfg: WorkspaceConfig):
    from t2g_core.workspace import Workspace

    return Workspace.at(cfg.root)


def _source_frame(data: DataConfig) -> tuple[pd.DataFrame, str]:
    """The feedback frame and a content id of where it came from (demo recipe, dataset adapter or file hash)."""
    from tasks.caching import content_digest

    if data.dataset is not None:
        from t2g_core.ingest import ingest

        path = None if data.source in ("hub", "demo") else data.source
        df = ingest(data.dataset, path, split=data.split, limit=data.limit)
        return df, f"dataset:{data.dataset}:{content_digest(str(Path(path).resolve())) if path else 'hub'}"
    if data.source == "demo":
        from t2g_core.demo import make_demo_feedback

        return make_demo_feedback(data.task, data.n_items, data.seed), f"demo:{data.task}:{data.n_items}:{data.seed}"
    from t2g_core.feedback import load_feedback

    df = load_feedback(data.source)
    if data.limit is not None:
        df = df.head(data.limit)
    return df, f"file:{content_digest(str(Path(data.source).resolve())) or data.source}"


@task(name="feedback", **stage_task_options(600))
def materialise_feedback(data: DataConfig, workspace: WorkspaceConfig) -> dict:
    """Demo data or a user's file -> an immutable, validated ``feedback`` artifact (version 1 of the dataset)."""
    from t2g_core.store import artifact_key

    ws = _workspace(workspace)
    df, origin = _source_frame(data)
    key = artifact_key("feedback", data, {"origin": origin})
    ref = ws.store.write("feedback", key, df, "feedback", extra={"source": data.source, "origin": origin, "version": 1})
    if latest_feedback(workspace) is None:
        set_latest_feedback(workspace, {**ref.to_dict(), "version": 1})
    with tracking.stage_run("feedback", data, workspace):
        tracking.log_output(ref, "feedback")
        tracking.log_metrics({"n_items": ref.n_rows})
    return ref.to_dict()


@task(name="build-models", **stage_task_options(3600))
def build_models(models: ModelsConfig, feedback: dict, workspace: WorkspaceConfig) -> dict:
    """Build (once) the tiny base and warm-started policy for the feedback's task; returns their folders."""
    from prefect import get_run_logger

    from t2g_core.models.tiny import ensure_demo_models
    from t2g_core.store import read_artifact

    ws = _workspace(workspace)
    df = read_artifact(feedback["path"], "feedback")
    with tracking.stage_run("build_models", models, workspace):
        tracking.log_dataset(feedback, "feedback", "training")
        built = ensure_demo_models(ws.models, models, df, progress=False, log=get_run_logger().info, rebuild=forced())
        build_info = built.policy.parent / "build.json"
        if build_info.exists():
            tracking.log_artifact(build_info)
    return {"base": str(built.base), "policy": str(built.policy)}


@task(name="append-feedback", **stage_task_options(600))
def append_feedback(new_file: str, current: dict | None, workspace: WorkspaceConfig) -> dict:
    """Append the items of ``new_file`` that are not in ``current`` (the dataset version it extends, from
    :func:`latest_feedback`) as a new version; cached on both contents, so a re-sent file changes nothing.

    Returns ``{"dataset": <ref of the new version>, "new_items": <ref of just the new items>, "version": n}``.
    Items whose id already exists are skipped (re-sent feedback never duplicates rows).
    """
    import pandas as pd

    from t2g_core.feedback import load_feedback
    from t2g_core.store import artifact_key, read_artifact

    ws = _workspace(workspace)
    incoming = load_feedback(new_file)
    base = read_artifact(current["path"], "feedback") if current else incoming.iloc[0:0]
    fresh = incoming[~incoming["id"].isin(set(base["id"]))].reset_index(drop=True)
    version = int(current.get("version", 1)) + 1 if current else 1
    new_ref = ws.store.write(
        "feedback_delta",
        artifact_key("feedback_delta", None, {"file": _sha(new_file)}),
        fresh,
        "feedback",
        extra={"source": new_file},
    )
    merged = pd.concat([base, fresh], ignore_index=True)
    key = artifact_key("feedback", None, {"parent": current["sha256"] if current else "", "delta": new_ref.sha256})
    ref = ws.store.write(
        "feedback",
        key,
        merged,
        "feedback",
        extra={"source": new_file, "version": version, "parent": current["sha256"] if current else None},
    )
    set_latest_feedback(workspace, {**ref.to_dict(), "version": version})
    with tracking.stage_run("append_feedback", {"file": new_file, "version": version}, workspace):
        tracking.log_dataset(new_ref, "feedback_delta", "annotation")
        tracking.log_output(ref, "feedback")
        tracking.log_metrics({"new_items": len(fresh), "items": len(merged), "version": version})
    return {"dataset": {**ref.to_dict(), "version": version}, "new_items": new_ref.to_dict(), "version": version}


def _sha(path: str) -> str:
    from t2g_core.store import sha256_file

    return sha256_file(path)


def _read_pointer(workspace: WorkspaceConfig, stage: str, name: str) -> dict | None:
    pointer = _workspace(workspace).artifacts / stage / name
    return json.loads(pointer.read_text(encoding="utf-8")) if pointer.exists() else None


def _write_pointer(workspace: WorkspaceConfig, stage: str, name: str, ref: dict) -> None:
    """Move a version pointer atomically."""
    from t2g_core.store import write_text_atomic

    write_text_atomic(_workspace(workspace).artifacts / stage / name, json.dumps(ref, indent=2))


def latest_feedback(workspace: WorkspaceConfig) -> dict | None:
    """The current version of the feedback dataset (``ArtifactRef`` dict plus ``version``), or None."""
    return _read_pointer(workspace, "feedback", LATEST)


def set_latest_feedback(workspace: WorkspaceConfig, ref: dict) -> None:
    _write_pointer(workspace, "feedback", LATEST, ref)


# ---------------------------------------------------------------------------------------------------------------
# Feedback inbox: new files are content-hashed, copied to an immutable place and announced once
# ---------------------------------------------------------------------------------------------------------------
FEEDBACK_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
LANDED_DIR, SEEN_FILE, PROCESSED_FILE = ".landed", ".seen.json", ".processed.json"


def _ledger(path: Path) -> dict[str, str]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _save_ledger(path: Path, data: dict[str, str]) -> None:
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


@task(name="scan-inbox", timeout_seconds=300, retries=2, retry_delay_seconds=[5, 30])
def scan_inbox(inbox: str, workspace: WorkspaceConfig) -> list[dict]:
    """Hash every feedback file in ``inbox`` (a folder or an fsspec URL); copy unseen ones into the workspace.

    Returns ``[{"sha256", "path" (immutable local copy), "source"}]`` for files whose content was never seen; the
    seen-set is the file ``<workspace>/inbox/.seen.json`` (content hash -> original path), so renaming or re-sending
    a file does not announce it twice.
    """
    import hashlib

    import fsspec

    ws = _workspace(workspace)
    seen_path = ws.inbox / SEEN_FILE
    seen = _ledger(seen_path)
    fs, root = fsspec.core.url_to_fs(inbox)
    landed_dir = ws.inbox / LANDED_DIR
    landed_dir.mkdir(parents=True, exist_ok=True)
    new: list[dict] = []
    for name in sorted(fs.find(root)):
        if Path(name).name.startswith(".") or f"/{LANDED_DIR}/" in name or not name.endswith(FEEDBACK_SUFFIXES):
            continue
        data = fs.cat_file(name)
        sha = hashlib.sha256(data).hexdigest()
        if sha in seen:
            continue
        copy = landed_dir / f"{sha[:32]}{Path(name).suffix}"
        if not copy.exists():
            tmp = copy.with_name(f".{copy.name}.tmp")
            tmp.write_bytes(data)
            tmp.replace(copy)
        seen[sha] = name
        new.append({"sha256": sha, "path": str(copy), "source": name})
    _save_ledger(seen_path, seen)
    return new


def pending_feedback_files(workspace: WorkspaceConfig) -> list[str]:
    """Landed inbox files not yet appended to the feedback dataset, oldest first."""
    ws = _workspace(workspace)
    done = _ledger(ws.inbox / PROCESSED_FILE)
    files = [p for p in (ws.inbox / LANDED_DIR).glob("*") if p.is_file() and not p.name.startswith(".")]
    return [str(p) for p in sorted(files, key=lambda p: p.stat().st_mtime) if p.name not in done]


def mark_processed(path: str, version: int, workspace: WorkspaceConfig) -> None:
    ledger_path = _workspace(workspace).inbox / PROCESSED_FILE
    ledger = _ledger(ledger_path)
    ledger[Path(path).name] = f"feedback version {version}"
    _save_ledger(ledger_path, ledger)


LATEST_ANNOTATIONS = "LATEST.json"


@task(name="merge-annotations", **stage_task_options(600))
def merge_annotations(previous: dict | None, delta: dict, workspace: WorkspaceConfig) -> dict:
    """The previous annotations plus the new items' (a new item's id replaces an older row with that id)."""
    import pandas as pd

    from t2g_core.store import artifact_key, read_artifact

    ws = _workspace(workspace)
    frames = [read_artifact(previous["path"], "annotations")] if previous else []
    frames.append(read_artifact(delta["path"], "annotations"))
    merged = pd.concat(frames, ignore_index=True).drop_duplicates("id", keep="last").reset_index(drop=True)
    key = artifact_key(
        "annotations", None, {"previous": previous["sha256"] if previous else "", "delta": delta["sha256"]}
    )
    ref = ws.store.write("annotations", key, merged, "annotations", extra={"delta": delta["sha256"]})
    with tracking.stage_run("merge_annotations", {"items": len(merged)}, workspace):
        if previous:
            tracking.log_dataset(previous, "annotations", "annotation")
        tracking.log_dataset(delta, "annotations_delta", "annotation")
        tracking.log_output(ref, "annotations")
    return ref.to_dict()


def latest_annotations(workspace: WorkspaceConfig) -> dict | None:
    return _read_pointer(workspace, "annotations", LATEST_ANNOTATIONS)


def set_latest_annotations(workspace: WorkspaceConfig, ref: dict) -> None:
    _write_pointer(workspace, "annotations", LATEST_ANNOTATIONS, ref)
