"""One Prefect test harness (a temporary database, its API server in a subprocess) shared by the flow tests of a test
session (under pytest-xdist: of a worker)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """Start the harness once (about 7 s); flow tests request this fixture. Results of tasks run outside a
    workspace's own result storage go to a folder of this session, never to ``~/.prefect/storage``: a cached result
    there (a review sample in another session's deleted temporary workspace) would be reused across sessions."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    storage = tmp_path_factory.mktemp("prefect-storage")
    with temporary_settings({PREFECT_LOCAL_STORAGE_PATH: str(storage)}):
        with prefect_test_harness(server_startup_timeout=90):
            yield
