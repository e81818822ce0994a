"""The feedback inbox's Prefect task: new files are content-hashed, copied to an immutable place and announced once.

The inbox is written by others: only regular files of at most ``workspace.inbox_max_mb`` are taken, hashed and
copied in chunks (``t2g_core.inbox``: no symlink, FIFO or device is opened, and a copy keeps the source's
permission bits); what is refused is logged and left where it is.
"""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.inbox import scan


@task(name="scan-inbox", timeout_seconds=300, retries=2, retry_delay_seconds=[5, 30])
def scan_inbox(inbox: str, workspace: WorkspaceConfig) -> list[dict]:
    """The new feedback files of ``inbox`` (a folder or an fsspec URL) taken into the workspace
    (:func:`t2g_core.inbox.scan`: ``[{"sha256", "path", "source"}]``, each content once); refusals are logged."""
    return scan(inbox, workspace, _warn)


def _warn(message: str) -> None:
    """A refusal in the run log, or (a scan outside any run: the serve process's inbox watch) in its process log."""
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_logger

    try:
        get_run_logger().warning("%s", message)
    except MissingContextError:
        get_logger("text2grad.inbox").warning("%s", message)
