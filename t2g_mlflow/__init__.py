"""MLflow for the pipeline, in one place: the tracking store, runs, datasets, the model registry and lineage.

Only this package imports mlflow (``tests/core/test_layers.py``); the Prefect tasks, the flows and the command line
use it, the library (``t2g_core``) never does, and this package never imports Prefect (the tasks hand it Prefect's
ids: ``tasks.links``). mlflow is imported inside functions, so importing a module here is fast. Each module's
docstring says what it holds (``tags``, ``experiment``, ``runs``, ``datasets``, ``tracker``, ``registry``, ``lineage``).
"""
