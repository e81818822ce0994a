"""New feedback: inbox files announced as Prefect events, and the re-annotation they trigger.

The serve process (``deployments/serve.py``) runs :func:`watch_inbox`: every few seconds it lists the inbox (names,
sizes, modification times: no reading, no flow run) and only when the listing changed and then held still for one
interval does it hash the files and emit one ``text2grad.feedback.landed`` event per file whose content it has never
seen (:func:`announce`). The ``feedback-sensor`` flow does the same scan once, for a manual run from the UI or a work
pool without a serve process. The ``reannotate`` deployment has an event trigger on that event, debounced (one run
per burst); each run appends *every* pending file to the feedback dataset as a new version, annotates the items the
current annotations do not cover and merges them in, so a debounced burst loses nothing and both datasets' version
pointers move together (one file, one writer; a run whose base version moved meanwhile fails and leaves its files
pending); ``then="policy"`` continues to a whole pipeline run on that latest version.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

from prefect import flow, get_run_logger

from t2g_core import datasets, inbox
from t2g_core.config import PipelineConfig, Preset, WorkspaceConfig
from t2g_core.config.data import LATEST
from t2g_core.config.presets import with_preset
from t2g_core.stages.refs import ArtifactRef
from t2g_core.stages.registry import settings_for
from t2g_core.workspace import Workspace
from t2g_env.serving import ServedConfig, ServedInbox, ServedWorkspace
from tasks import annotate, data
from tasks.caching import cached
from tasks.inbox import pending_feedback, scan_inbox
from tasks.pipeline import HOOKS

EVENT = "text2grad.feedback.landed"
RESOURCE_PREFIX = "text2grad.feedback."


def announce(workspace: WorkspaceConfig, inbox: str | None = None, scan: Callable | None = None) -> list[dict]:
    """Copy the inbox's unseen files into the workspace and emit one event per file; returns them."""
    from prefect.events import emit_event

    folder = inbox or str(Workspace.at(workspace.root).inbox)
    new_files = (scan or scan_inbox.fn)(folder, workspace)
    for item in new_files:
        emit_event(
            event=EVENT,
            resource={"prefect.resource.id": f"{RESOURCE_PREFIX}{item['sha256'][:16]}", "path": item["path"]},
            payload={
                "path": item["path"],
                "sha256": item["sha256"],
                "source": item["source"],
                "workspace": workspace.root,
            },
        )
    return new_files


@flow(name="feedback-sensor")
def feedback_sensor(workspace: ServedWorkspace = WorkspaceConfig(), inbox: ServedInbox = None) -> list[str]:  # noqa: B008
    """Emit one event per new feedback file in the inbox (default ``<workspace>/inbox``); returns their hashes."""
    new_files = announce(workspace, inbox, scan=scan_inbox)
    get_run_logger().info("%d new feedback file(s) in %s", len(new_files), inbox or "the workspace inbox")
    return [item["sha256"] for item in new_files]


def inbox_listing(folder: str) -> tuple:
    """What the inbox holds, cheaply: (name, size, modification time) of its files, hidden ones left out."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(folder)
    if not fs.exists(root):
        return ()
    found = fs.find(root, detail=True)
    return tuple(
        sorted(
            (name, info.get("size"), str(info.get("mtime") or info.get("LastModified") or ""))
            for name, info in found.items()
            if not any(part.startswith(".") for part in name.removeprefix(root).split("/"))
        )
    )


def watch_inbox(
    workspace: WorkspaceConfig, interval_s: float, stop: threading.Event, inbox: str | None = None, log=print
) -> None:
    """Until ``stop`` is set: announce the inbox's new files once its listing changed and then held still for one
    interval (a file still being written is not hashed half-way). Creates no flow run while nothing arrives."""
    folder = inbox or str(Workspace.at(workspace.root).inbox)
    seen, settled = None, None
    while not stop.wait(interval_s):
        try:
            listing = inbox_listing(folder)
            if listing == seen and listing != settled:
                new_files = announce(workspace, folder)
                settled = listing
                if new_files:
                    log(f"inbox: {len(new_files)} new feedback file(s) announced")
            seen = listing
        except Exception as exc:  # noqa: BLE001 - a failed scan is retried at the next interval, never kills serving
            log(f"inbox watch: {type(exc).__name__}: {exc} (retrying in {interval_s:g} s)")


@flow(name="reannotate", **HOOKS)
def reannotate(
    config: ServedConfig = PipelineConfig(),  # noqa: B008
    path: str | None = None,
    then: Literal["none", "validate", "reward_model", "policy"] = "none",
    preset: Preset = "full",
) -> dict:
    """Append every pending inbox file to the feedback dataset and annotate the items not annotated yet.

    ``path`` is the file named by the triggering event (informational: all pending files are processed, which is
    what makes debouncing safe; one the feedback reader refuses is recorded as rejected with its reason and logged,
    and the others go on). ``then`` continues on the whole latest version of the dataset: to validation, to
    validation and a reward-model refresh, or (``policy``) to a whole ``text2grad`` run with ``data.source: latest``
    (reward model, PPO, evaluation and its outcome; the annotations made here are reused). ``preset`` sizes it all as
    ``text2grad``'s does.
    """
    from flows.stages import align_and_validate, reward_model

    config = with_preset(config, preset)
    ws, root, settings = config.workspace, config.workspace.root, settings_for("annotate", config)
    versions = []
    for file in pending_feedback(ws):
        base = datasets.latest_feedback(ws)  # the version this file extends; another run that moves it first wins
        feedback = cached(data.append_feedback, root)(ArtifactRef.of(file, "feedback"), base, ws)
        todo = cached(annotate.unannotated, root)(feedback, datasets.latest_annotations(ws), ws)
        fresh = cached(annotate.annotate_task(settings), root)(todo, settings, ws)
        annotations = cached(annotate.merge_annotations, root)(datasets.latest_annotations(ws), fresh, ws)
        version = datasets.advance_versions(ws, feedback, annotations, based_on=base)
        inbox.mark_processed(file, version, ws)
        versions.append({"file": file, "version": version, "feedback": feedback, "annotations": annotations})
    result: dict = {"processed": versions, "trigger_path": path}
    if not versions or then == "none":
        return result
    if then == "policy":
        from flows.text2grad import text2grad

        latest = config.model_copy(update={"data": config.data.model_copy(update={"source": LATEST})})
        result["pipeline"] = text2grad(config=latest)
        return result
    feedback, annotations = versions[-1]["feedback"], versions[-1]["annotations"]
    models = cached(data.build_models, root)(datasets.models_feedback(ws, feedback), settings_for("models", config), ws)
    spans, validation = align_and_validate(config, feedback, models, annotations)
    result.update(align=spans, validate=validation)
    if then == "reward_model":
        result["reward_model"] = reward_model(config, feedback, models, annotations, spans, validation)
    return result
