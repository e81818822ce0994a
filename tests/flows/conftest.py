"""One Prefect test harness (a temporary database, its API server in a subprocess) shared by the flow tests of a test
session (under pytest-xdist: of a worker)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """Start the harness once (about 7 s); flow tests request this fixture."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield
