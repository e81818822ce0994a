"""New feedback: a sensor that announces inbox files as Prefect events, and the re-annotation they trigger.

``feedback-sensor`` runs on an interval, hashes the files in the inbox and emits one ``text2grad.feedback.landed``
event per file whose content it has never seen. The ``reannotate`` deployment has an event trigger on that event,
debounced (one run per burst); each run appends *every* pending file to the feedback dataset as a new version,
annotates just the new items and merges them into the annotations, so a debounced burst loses nothing.
"""

from __future__ import annotations

from typing import Literal

from prefect import flow, get_run_logger

from t2g_core.config import PipelineConfig, WorkspaceConfig

EVENT = "text2grad.feedback.landed"
RESOURCE_PREFIX = "text2grad.feedback."


@flow(name="feedback-sensor")
def feedback_sensor(workspace: WorkspaceConfig = WorkspaceConfig(), inbox: str | None = None) -> list[str]:  # noqa: B008
    """Emit one event per new feedback file in the inbox (default ``<workspace>/inbox``); returns their hashes."""
    from prefect.events import emit_event

    from t2g_core.workspace import Workspace
    from tasks.data import scan_inbox

    folder = inbox or str(Workspace.at(workspace.root).inbox)
    new_files = scan_inbox(folder, workspace)
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
    get_run_logger().info("%d new feedback file(s) in %s", len(new_files), folder)
    return [item["sha256"] for item in new_files]


@flow(name="reannotate")
def reannotate(
    config: PipelineConfig = PipelineConfig(),  # noqa: B008
    path: str | None = None,
    then: Literal["none", "validate", "reward_model"] = "none",
) -> dict:
    """Append every pending inbox file to the feedback dataset and annotate just its new items.

    ``path`` is the file named by the triggering event (informational: all pending files are processed, which is
    what makes debouncing safe). ``then`` continues to validation, or to validation and a reward-model refresh.
    """
    from flows.annotate import annotate_task as pick_annotate_task
    from flows.quality import align_and_validate
    from flows.reward_model import train_reward_model
    from flows.stages import is_ref, not_built
    from tasks import data
    from tasks.caching import cached

    ws, root = config.workspace, config.workspace.root
    annotate_task = pick_annotate_task(config)
    if annotate_task is None:
        return not_built("annotate")
    versions = []
    for file in data.pending_feedback_files(ws):
        appended = cached(data.append_feedback, root)(file, data.latest_feedback(ws), ws)
        delta = cached(annotate_task, root)(appended["new_items"], config.annotate, ws)
        merged = cached(data.merge_annotations, root)(data.latest_annotations(ws), delta, ws)
        data.set_latest_annotations(ws, merged)
        data.mark_processed(file, appended["version"], ws)
        versions.append(
            {"file": file, "version": appended["version"], "feedback": appended["dataset"], "annotations": merged}
        )
    result: dict = {"processed": versions, "trigger_path": path}
    if not versions or then == "none":
        return result
    models = cached(data.build_models, root)(config.models, versions[-1]["feedback"], ws)
    feedback_data = {"feedback": versions[-1]["feedback"], "models": models}
    quality = align_and_validate(config, feedback_data, versions[-1]["annotations"])
    result.update(quality)
    if then == "reward_model" and is_ref(quality.get("validation")):
        result["reward_model"] = train_reward_model(config, feedback_data, versions[-1]["annotations"], quality)
    return result
