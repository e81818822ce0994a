"""Prefect flows: each reads like a table of contents of its stage group; the work happens in ``tasks/``.

Heavy modules (torch, transformers, mlflow) are imported inside tasks, so importing a flow is fast.
"""

import atexit
import gc

# A process that runs these flows (a Prefect flow-run process, `deployments/serve.py`, `t2g run`, a test worker) skips
# the interpreter's last garbage collections at exit, over everything torch, transformers, Prefect and MLflow made
# (seconds of CPU); its exit handlers still run and its files are flushed as usual (t2g_cli.main does the same).
atexit.register(gc.freeze)
