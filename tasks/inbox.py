"""The feedback inbox's Prefect tasks: the inbox's new files taken into the workspace once each (``t2g_core.inbox``:
regular files only, size-capped, streamed), and the landed files still to append; what is refused is logged."""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.inbox import pending_files, scan
from tasks.links import in_prefect_run


@task(name="scan-inbox", timeout_seconds=300, retries=2, retry_delay_seconds=[5, 30])
def scan_inbox(inbox: str, workspace: WorkspaceConfig) -> list[dict]:
    """The new feedback files of ``inbox`` (a folder or an fsspec URL) taken into the workspace
    (:func:`t2g_core.inbox.scan`: ``[{"sha256", "path", "source"}]``, each content once); refusals are logged."""
    return scan(inbox, workspace, _warn)


@task(name="pending-feedback")
def pending_feedback(workspace: WorkspaceConfig) -> list[str]:
    """The landed inbox files to append, oldest first (:func:`t2g_core.inbox.pending_files`); one the feedback reader
    refuses is recorded as rejected, its reason logged, and does not hold up the others."""
    return pending_files(workspace, _warn)


def _warn(message: str) -> None:
    """A refusal in the run log, or (a scan outside any run: the serve process's inbox watch) in its process log."""
    from prefect import get_run_logger
    from prefect.logging import get_logger

    (get_run_logger() if in_prefect_run() else get_logger("text2grad.inbox")).warning("%s", message)
