"""The MLflow experiment a workspace logs to is pinned: whoever reaches the tracking server could rename it and create
another under its name with an artifact location of their choosing, where the next run would write its reports."""

from __future__ import annotations

import pytest


def test_an_experiment_created_under_the_name_since_is_refused(workspace_cfg, tmp_path):
    import mlflow

    from t2g_mlflow.experiment import ForeignExperiment, configure

    first = configure(workspace_cfg)
    assert configure(workspace_cfg) == first
    client = mlflow.MlflowClient()
    client.rename_experiment(first, "text2grad-old")
    client.create_experiment("text2grad", artifact_location=(tmp_path.parent / "theirs").as_uri())
    with pytest.raises(ForeignExperiment, match=r"'text2grad' \(id \d+, artifact location file:///.*theirs\) is not"):
        configure(workspace_cfg)
    client.rename_experiment(client.get_experiment_by_name("text2grad").experiment_id, "theirs")
    client.rename_experiment(first, "text2grad")
    assert configure(workspace_cfg) == first  # renamed back: accepted


def test_an_experiment_first_seen_on_a_server_keeps_its_artifacts_in_its_store_or_the_workspace(tmp_path):
    from mlflow.entities import Experiment

    from t2g_mlflow.experiment import ForeignExperiment, pin

    def experiment(number: int, location: str) -> Experiment:
        return Experiment(str(number), f"exp{number}", location, "active")

    with pytest.raises(ForeignExperiment, match="artifacts in the server's store or in"):
        pin(experiment(1, "file:///srv/elsewhere"), tmp_path, server=True)
    with pytest.raises(ForeignExperiment):
        pin(experiment(2, "s3://their-bucket/2"), tmp_path, server=True)
    pin(experiment(3, "mlflow-artifacts:/3"), tmp_path, server=True)
    pin(experiment(4, (tmp_path / "mlartifacts").as_uri()), tmp_path, server=True)
    pin(experiment(3, "mlflow-artifacts:/3"), tmp_path, server=True)  # as pinned


def test_a_new_workspace_store_starts_as_the_kept_copy_of_a_migrated_one(tmp_path, monkeypatch, fresh_workspace):
    """The first new store is migrated and kept (before the workspace's experiment is made: the copy holds none);
    the next new workspace starts from the copy, its default experiment placed where MLflow places a new store's."""
    import sqlite3

    import mlflow

    from t2g_env.kept_databases import kept_copy
    from t2g_mlflow.experiment import configure

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    configure(fresh_workspace(tmp_path / "one"))
    with sqlite3.connect(kept_copy("mlflow")) as db:
        assert db.execute("SELECT name FROM experiments").fetchall() == [("Default",)]
        db.execute("INSERT INTO experiment_tags (key, value, experiment_id) VALUES ('marker', 'kept copy', 0)")
    configure(fresh_workspace(tmp_path / "two"))
    default = mlflow.MlflowClient().get_experiment("0")
    assert default.tags == {"marker": "kept copy"}
    assert default.artifact_location == str(tmp_path / "mlruns" / "0")
