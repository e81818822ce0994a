"""Prefect flows: each reads like a table of contents of its stage group; the work happens in ``tasks/``.

Heavy modules (torch, transformers, mlflow) are imported inside tasks, so importing a flow is fast.
"""

import atexit
import gc

# A process running these flows (a flow-run process, serve.py, `t2g run`, a test worker) exits without the last garbage
# collections over all torch, Prefect and MLflow made (seconds of CPU), as t2g_cli.main: exit handlers still run.
atexit.register(gc.freeze)
