"""The feedback inbox's Prefect task: the inbox's new files taken into the workspace once each (``t2g_core.inbox``:
regular files only, size-capped, streamed); what is refused is logged and left where it is."""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.inbox import scan
from tasks.links import in_prefect_run


@task(name="scan-inbox", timeout_seconds=300, retries=2, retry_delay_seconds=[5, 30])
def scan_inbox(inbox: str, workspace: WorkspaceConfig) -> list[dict]:
    """The new feedback files of ``inbox`` (a folder or an fsspec URL) taken into the workspace
    (:func:`t2g_core.inbox.scan`: ``[{"sha256", "path", "source"}]``, each content once); refusals are logged."""
    return scan(inbox, workspace, _warn)


def _warn(message: str) -> None:
    """A refusal in the run log, or (a scan outside any run: the serve process's inbox watch) in its process log."""
    from prefect import get_run_logger
    from prefect.logging import get_logger

    (get_run_logger() if in_prefect_run() else get_logger("text2grad.inbox")).warning("%s", message)
