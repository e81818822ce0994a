"""New feedback: a sensor that announces inbox files as Prefect events, and the re-annotation they trigger.

``feedback-sensor`` runs on an interval, hashes the files in the inbox and emits one ``text2grad.feedback.landed``
event per file whose content it has never seen. The ``reannotate`` deployment has an event trigger on that event,
debounced (one run per burst); each run appends *every* pending file to the feedback dataset as a new version,
annotates the items the current annotations do not cover and merges them in, so a debounced burst loses nothing and
both datasets' version pointers move together (one file, one writer; a run whose base version moved meanwhile fails
and leaves its files pending).
"""

from __future__ import annotations

from typing import Literal

from prefect import flow, get_run_logger

from t2g_core.config import PipelineConfig, WorkspaceConfig
from t2g_env.serving import ServedConfig, ServedInbox, ServedWorkspace

EVENT = "text2grad.feedback.landed"
RESOURCE_PREFIX = "text2grad.feedback."


@flow(name="feedback-sensor")
def feedback_sensor(workspace: ServedWorkspace = WorkspaceConfig(), inbox: ServedInbox = None) -> list[str]:  # noqa: B008
    """Emit one event per new feedback file in the inbox (default ``<workspace>/inbox``); returns their hashes."""
    from prefect.events import emit_event

    from t2g_core.workspace import Workspace
    from tasks.inbox import scan_inbox

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
    config: ServedConfig = PipelineConfig(),  # noqa: B008
    path: str | None = None,
    then: Literal["none", "validate", "reward_model"] = "none",
) -> dict:
    """Append every pending inbox file to the feedback dataset and annotate the items not annotated yet.

    ``path`` is the file named by the triggering event (informational: all pending files are processed, which is
    what makes debouncing safe). ``then`` continues to validation, or to validation and a reward-model refresh, on
    the whole latest version of the dataset.
    """
    from flows.stages import align_and_validate, train_reward_model
    from t2g_core.config.stages import settings_for
    from t2g_core.stages.refs import ArtifactRef
    from tasks import annotate, data, inbox
    from tasks.caching import cached

    ws, root, settings = config.workspace, config.workspace.root, settings_for("annotate", config)
    versions = []
    for file in inbox.pending_files(ws):
        base = data.latest_feedback(ws)  # the version this file extends; another run that moves it first wins
        feedback = cached(data.append_feedback, root)(ArtifactRef.of(file, "feedback"), base, ws)
        todo = cached(annotate.unannotated, root)(feedback, data.latest_annotations(ws), ws)
        fresh = cached(annotate.annotate_task(settings), root)(todo, settings, ws)
        annotations = cached(annotate.merge_annotations, root)(data.latest_annotations(ws), fresh, ws)
        version = data.advance_versions(ws, feedback, annotations, based_on=base)
        inbox.mark_processed(file, version, ws)
        versions.append({"file": file, "version": version, "feedback": feedback, "annotations": annotations})
    result: dict = {"processed": versions, "trigger_path": path}
    if not versions or then == "none":
        return result
    feedback, annotations = versions[-1]["feedback"], versions[-1]["annotations"]
    models = cached(data.build_models, root)(feedback, settings_for("models", config), ws)
    spans, validation = align_and_validate(config, feedback, models, annotations)
    result.update(spans=spans, validation=validation)
    if then == "reward_model":
        result["reward_model"] = train_reward_model(config, feedback, models, annotations, spans, validation)
    return result
