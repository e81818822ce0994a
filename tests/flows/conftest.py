"""One Prefect test harness (a temporary database, its API server in a subprocess) shared by the flow tests of a test
session (under pytest-xdist: of a worker)."""

from __future__ import annotations

import pytest

from t2g_env.kept_databases import keep, place

HARNESS_DATABASE = "prefect-test.db"  # the name prefect_test_harness gives its database in its temporary folder


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """Start the harness once; flow tests request this fixture. Its database starts as the migrated copy `t2g run`
    keeps (t2g_env.kept_databases; without one, the harness's is kept as soon as it is migrated): its start took
    5.6 s instead of 12.0 s. Results of tasks run outside a workspace's own result storage go to a folder of this
    session, never to ``~/.prefect/storage``: a cached result there (a review sample in another session's deleted
    temporary workspace) would be reused across sessions. Flow runs here send no heartbeats: the end of each run
    joined Prefect's heartbeat thread, asleep for up to a second (147 runs, 55 s of waiting in the flow, task and CLI
    tests); the e2e tests' real servers keep them, and test_flow_form sets them where it checks them."""
    import prefect.testing.utilities as harness
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, PREFECT_LOCAL_STORAGE_PATH, temporary_settings

    folder = tmp_path_factory.mktemp("prefect-harness")
    storage = tmp_path_factory.mktemp("prefect-storage")
    database = folder / HARNESS_DATABASE
    placed = place(database, "prefect")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness, "mkdtemp", lambda: str(folder))
        with temporary_settings({PREFECT_LOCAL_STORAGE_PATH: str(storage), PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            with harness.prefect_test_harness(server_startup_timeout=90):
                if not placed:  # kept as migrated, before any test records a run in it
                    keep(database, "prefect")
                yield
