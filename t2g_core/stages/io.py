"""Reading stage inputs: one place that turns a reference into a validated DataFrame."""

from __future__ import annotations

import pandas as pd

from t2g_core.feedback import load_feedback
from t2g_core.store import ArtifactRef, read_artifact


def read(ref: ArtifactRef, schema: str) -> pd.DataFrame:
    """The rows of ``ref``, validated against ``schema`` (feedback may be Parquet, JSONL, CSV or a datasets folder)."""
    if schema == "feedback":
        return load_feedback(ref.path)
    return read_artifact(ref.path, schema)
