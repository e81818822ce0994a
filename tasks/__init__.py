"""Prefect tasks: thin adapters that load an artifact, call t2g_core, write an artifact, log to MLflow and return a
small reference (``ArtifactRef.to_dict()``). Only ``tasks/`` and ``flows/`` import prefect or mlflow."""
