"""One Prefect test harness (temporary database, in-process API) shared by every flow test of the session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """Start the harness once (about 7 s); flow tests request this fixture."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture(scope="session")
def mlflow_template_db(tmp_path_factory):
    """A migrated, empty MLflow SQLite database; copy it instead of creating one per test (about 1 s each)."""
    import mlflow

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    mlflow.MlflowClient(f"sqlite:///{path}").search_experiments()
    return path
