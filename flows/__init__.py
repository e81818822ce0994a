"""Prefect flows: each reads like a table of contents of its stage group; the work happens in ``tasks/``.

Heavy modules (torch, transformers, mlflow) are imported inside tasks, so importing a flow is fast.
"""
