"""Artifacts as MLflow dataset inputs: what a stage read and what it produced, by content.

Datasets are logged with ``mlflow.data.from_pandas(source=<parquet path>, digest=<content sha256>)``: the digest is the
artifact's content hash, and an input names the run that produced it (``PRODUCER_TAG``), which is how ``t2g
lineage`` walks from a consumer back to its producer; the consumer run's description links that producer run, which
is how a person in the MLflow UI does.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from t2g_mlflow.tags import (
    ARTIFACT_KEY_TAG,
    DATA_CONTEXT_TAG,
    NOTE_TAG,
    OUTPUT_CONTEXT,
    OUTPUT_TAG_PREFIX,
    PRODUCER_TAG,
    ROWS_TAG,
    SCHEMA_TAG,
    SHA256_TAG,
)

if TYPE_CHECKING:
    from t2g_core.config import WorkspaceConfig
    from t2g_core.store import ArtifactRef

DIGEST_LEN = 32  # MLflow caps dataset digests at 36 chars: the first 32 hex chars of the sha256


def _as_ref(ref: ArtifactRef | Mapping[str, Any]) -> ArtifactRef:
    from t2g_core.store import ArtifactRef

    return ref if isinstance(ref, ArtifactRef) else ArtifactRef.model_validate(dict(ref))


def log_dataset(
    ref: ArtifactRef | Mapping[str, Any],
    name: str,
    context: str,
    run_id: str | None = None,
    workspace: WorkspaceConfig | None = None,
) -> None:
    """Log an artifact's Parquet as an MLflow dataset input of ``run_id`` (default: the active run): source = its
    path, digest = its content sha256, tag ``t2g.producer_run_id`` = the run that produced it (when known).

    ``context``: "annotation" | "training" | "eval" for inputs; "output" records what the stage produced
    (also set as the run tag ``t2g.output.<name>``), which is what ``t2g lineage`` follows. The consumer run's
    description names an input by its version in ``workspace`` (:func:`note_producer`).
    """
    import mlflow
    import pandas as pd
    from mlflow.entities import DatasetInput, InputTag

    from t2g_core.datasets import dataset_name

    ref = _as_ref(ref)
    run_id = run_id or mlflow.active_run().info.run_id
    df = pd.read_parquet(ref.data_path)
    for col in df.columns:  # list/dict cells break MLflow's schema inference; lineage needs the source, not types
        if df[col].map(lambda v: isinstance(v, (list, dict)) or hasattr(v, "tolist")).any():
            df[col] = df[col].map(lambda v: json.dumps(v.tolist() if hasattr(v, "tolist") else v, default=str))
    tags = {DATA_CONTEXT_TAG: context, SHA256_TAG: ref.sha256, ARTIFACT_KEY_TAG: ref.key, SCHEMA_TAG: ref.schema_name}
    tags[ROWS_TAG] = str(ref.n_rows)
    if ref.run_id and context != OUTPUT_CONTEXT:
        tags[PRODUCER_TAG] = ref.run_id  # lineage follows this exact run (see t2g_mlflow.lineage)
    with warnings.catch_warnings():  # "source can be interpreted in multiple ways" (both are the local file) and
        warnings.simplefilter("ignore", UserWarning)  # schema-inference hints about integer columns (inferred lazily,
        ds = mlflow.data.from_pandas(df, source=ref.data_path, name=name, digest=ref.sha256[:DIGEST_LEN])
        entity = ds._to_mlflow_entity()  # when the entity is built)
    client = mlflow.MlflowClient()
    client.log_inputs(run_id, datasets=[DatasetInput(entity, [InputTag(k, v) for k, v in tags.items()])])
    if context == OUTPUT_CONTEXT:
        client.set_tag(run_id, f"{OUTPUT_TAG_PREFIX}{name}", ref.sha256)
    elif PRODUCER_TAG in tags:
        note_producer(client, run_id, name, dataset_name(workspace, ref), tags[PRODUCER_TAG])


def note_producer(client, run_id: str, name: str, shown: str, producer: str) -> None:
    """A line in the consumer run's description (markdown on its page) linking the dataset, ``shown`` by its one name
    (``feedback version 1 (1024 rows, sha256 …)``), to the run that produced it, so the MLflow UI reaches the producer
    from the consumer in one click."""
    from mlflow.exceptions import MlflowException

    try:
        made_by = client.get_run(producer)
    except MlflowException:
        return
    link = f"#/experiments/{made_by.info.experiment_id}/runs/{producer}"
    line = f"- input **{name}**: {shown}, produced by run [{made_by.info.run_name or producer[:8]}]({link})"
    note = client.get_run(run_id).data.tags.get(NOTE_TAG, "")
    if line not in note:
        client.set_tag(run_id, NOTE_TAG, f"{note}\n{line}" if note else f"Inputs:\n\n{line}")


def log_output(ref: ArtifactRef | Mapping[str, Any], name: str) -> None:
    """Record an artifact the active stage run produced (``log_dataset(ref, name, "output")``)."""
    log_dataset(ref, name, OUTPUT_CONTEXT)
