"""One Prefect test harness (temporary database, in-process API) shared by every flow test of the session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """Start the harness once (about 7 s); flow tests request this fixture."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield
