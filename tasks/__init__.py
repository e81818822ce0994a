"""Prefect tasks: thin adapters that load an artifact, call t2g_core, write an artifact, log to MLflow (through
``t2g_mlflow``) and return a small reference (``ArtifactRef.to_dict()``). Besides the tasks, only their Prefect glue
lives here: the stage context (``stage``), the cache (``caching``), progress artifacts (``progress``) and the
pipeline run's hooks (``pipeline``)."""
