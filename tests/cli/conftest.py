"""Fixtures for the command-line tests."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def mlflow_db_in_tmp_path(tmp_path, mlflow_template_db):
    """``tmp_path/mlflow.db``, a migrated MLflow store: a command on the workspace ``tmp_path`` skips the migrations."""
    shutil.copy(mlflow_template_db, tmp_path / "mlflow.db")
    return tmp_path / "mlflow.db"
