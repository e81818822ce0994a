"""MLflow for the pipeline, in one place: the tracking store, runs, datasets, the model registry and lineage.

Only this package imports mlflow (``tests/core/test_layers.py``); the Prefect tasks, the flows and the command line
use it, the library (``t2g_core``) never does, and this package never imports Prefect (the tasks hand it Prefect's
ids: ``tasks.links``). mlflow is imported inside functions, so importing a module here is fast.

- ``tags``: every tag and dataset-context name written into MLflow and read back, defined once.
- ``experiment``: the tracking URI, the database created once under a lock, the experiment.
- ``runs``: one parent run per pipeline flow run, one nested run per stage, what the parent run records.
- ``datasets``: artifacts logged as dataset inputs with their content digest and producer run.
- ``tracker``: the ``t2g_core.tracking.Tracker`` protocol over one MLflow run.
- ``registry``: model folders logged, registered, aliased, promoted, and fetched back by ``models:/`` reference.
- ``lineage``: from a registered model version back to the feedback it was learnt from.
"""
