"""The align task through ``.fn()``: artifacts in, spans artifact out, metrics logged to the stage's MLflow run."""

from __future__ import annotations

import pandas as pd
import pytest

from t2g_core.config import AlignConfig
from t2g_core.store import ArtifactStore, read_artifact

RESPONSES = {"a-1": "Alice lives in “Paris” and works as a nurse.", "a-2": "Bob is 42 years old.\n    He has a dog."}


def _write_inputs(root):
    store = ArtifactStore(root / "artifacts")
    n = len(RESPONSES)
    fb = pd.DataFrame(
        {
            "id": list(RESPONSES),
            "task": ["summarization"] * n,
            "prompt": ["p"] * n,
            "response": list(RESPONSES.values()),
            **{c: [None] * n for c in ("critique", "reference", "tests", "entry_point", "meta")},
        }
    )
    ann = pd.DataFrame(
        {
            "id": list(RESPONSES),
            "annotator": ["ref"] * n,
            "critique": ["c"] * n,
            "good_spans": [["works as a nurse"], ["has a dog"]],
            "poor_spans": [['lives in "Paris"'], ["is 24 years", "He has a cat and"]],
            "reasoning": [None] * n,
            "status": ["ok"] * n,
            "error": [None] * n,
            "raw": [None] * n,
            "prompt_tokens": [0] * n,
            "completion_tokens": [0] * n,
            "latency_s": [0.0] * n,
        }
    )
    return store.write("feedback", "k1", fb, "feedback"), store.write("annotations", "k2", ann, "annotations")


@pytest.mark.slow
def test_align_task_writes_spans_and_logs_metrics(workspace_cfg, run_task, tmp_path):
    import mlflow

    from t2g_core.config.stages import AlignSettings
    from t2g_core.store import read_manifest
    from tasks.align import align

    feedback, annotations = _write_inputs(tmp_path)
    out = run_task(align, feedback, annotations, None, AlignSettings(align=AlignConfig()), workspace_cfg)
    spans = read_artifact(out.path, "spans")
    assert len(spans) == out.n_rows == 5
    assert list(spans["match"]) == [
        "exact",
        "normalized",
        "exact",
        "fuzzy",
        "unmatched",
    ]  # "is 24 years" ~ "is 42 years"
    assert read_manifest(out)["extra"]["metrics"]["unmatched_rate"] == pytest.approx(0.2)
    runs = mlflow.search_runs(search_all_experiments=True, filter_string="tags.`t2g.stage` = 'align'")
    assert len(runs) == 1 and runs["metrics.align.unmatched_rate"].iloc[0] == pytest.approx(0.2)
    assert out.run_id == runs["run_id"].iloc[0]  # the output names the run that produced it (lineage)
    again = run_task(align, feedback, annotations, None, AlignSettings(align=AlignConfig()), workspace_cfg)
    assert again.path == out.path  # same inputs and config: the same immutable artifact
