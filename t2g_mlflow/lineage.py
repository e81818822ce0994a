"""Lineage from MLflow alone: a registered policy version back to the feedback files it was learnt from.

Each stage run logs its input datasets (``log_input``, digest = content sha256, tag ``t2g.producer_run_id`` = the
run that produced it) and the datasets it produced (context ``output``); a run that consumed a registered model
carries the tag ``t2g.uses.<name> = <version>``. The walk: model version -> its source run -> for every input
dataset, its producer run (the one the input names; for inputs logged without it, the latest run that output a
dataset with the same digest and *finished before the consumer started*) -> ... until a dataset has no producer (a
feedback file), and for every model used, that model version's own chain.
"""

from __future__ import annotations

from typing import Any

from t2g_mlflow.registry import CHAMPION, LOGGED_MODEL_PREFIX, REGISTRY_PREFIX
from t2g_mlflow.tags import (
    DATA_CONTEXT_TAG,
    FLOW_RUN_TAG,
    OUTPUT_CONTEXT,
    PRODUCER_TAG,
    STAGE_TAG,
    USES_TAG_PREFIX,
)


def _client(tracking_uri: str):
    import mlflow

    return mlflow.MlflowClient(tracking_uri)


def _model_version(client, name: str, version: str):
    from mlflow.exceptions import MlflowException

    try:
        if version.isdigit():
            return client.get_model_version(name, version)
        return client.get_model_version_by_alias(name, version)
    except MlflowException as exc:
        raise LookupError(f"no model version {name} {version!r} in MLflow: {what_exists(client, name)}") from exc


def what_exists(client, name: str) -> str:
    """What a user can ask for instead: the model's versions and aliases, or why there are none yet."""
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(name)
    except MlflowException:
        return f"no model named {name} is registered yet (a pipeline run registers it after PPO)"
    versions = sorted(int(v.version) for v in client.search_model_versions(f"name = '{name}'"))
    aliases = ", ".join(f"{alias} -> {v}" for alias, v in sorted((model.aliases or {}).items())) or "none"
    text = f"versions {', '.join(map(str, versions)) or 'none'}; aliases {aliases}"
    if CHAMPION not in (model.aliases or {}):
        text += (
            f"; no version is {CHAMPION} yet: evaluation promotes a version only when it beats the policy before "
            "PPO (and the current champion)"
        )
    return text


def _source_run_id(client, mv) -> str | None:
    if mv.run_id:
        return mv.run_id
    if (mv.source or "").startswith(LOGGED_MODEL_PREFIX):
        return client.get_logged_model(mv.source.removeprefix(REGISTRY_PREFIX)).source_run_id
    return None


def _producer(client, run, dataset_input) -> Any | None:
    """The run that produced ``dataset_input`` of ``run``: named by its tag, else found by digest and time."""
    named = next((t.value for t in dataset_input.tags if t.key == PRODUCER_TAG), None)
    if named:
        return client.get_run(named)
    digest = dataset_input.dataset.digest
    runs = client.search_runs(
        [run.info.experiment_id], f"dataset.digest = '{digest}' and dataset.context = '{OUTPUT_CONTEXT}'"
    )
    earlier = [
        r
        for r in runs
        if r.info.run_id != run.info.run_id
        and r.info.status == "FINISHED"
        and r.info.end_time is not None
        and r.info.end_time <= run.info.start_time
        and any(d.dataset.digest == digest and _context(d) == OUTPUT_CONTEXT for d in r.inputs.dataset_inputs)
    ]
    return max(earlier, key=lambda r: r.info.end_time) if earlier else None


def _context(dataset_input) -> str | None:
    return next((t.value for t in dataset_input.tags if t.key == DATA_CONTEXT_TAG), None)


def _describe_run(run) -> str:
    tags = run.data.tags
    stage = tags.get(STAGE_TAG, run.info.run_name)
    flow = tags.get(FLOW_RUN_TAG, "")
    return f"run {run.info.run_id} [{stage}] {run.info.status}" + (f" prefect flow run {flow}" if flow else "")


def _walk_run(client, run, depth: int, seen: set[str], out: list[tuple[int, str]]) -> None:
    if run.info.run_id in seen:
        out.append((depth, f"(see {run.info.run_id} above)"))
        return
    seen.add(run.info.run_id)
    out.append((depth, _describe_run(run)))
    for key, version in sorted(run.data.tags.items()):
        if key.startswith(USES_TAG_PREFIX):
            _walk_model(client, key.removeprefix(USES_TAG_PREFIX), version, depth + 1, seen, out)
    for d in run.inputs.dataset_inputs:
        if _context(d) == OUTPUT_CONTEXT:
            continue
        ds = d.dataset
        out.append((depth + 1, f"<- dataset {ds.name} ({_context(d)}) digest {ds.digest} source {_source_path(ds)}"))
        producer = _producer(client, run, d)
        if producer is not None:
            _walk_run(client, producer, depth + 2, seen, out)


def _source_path(ds) -> str:
    import json

    try:
        src = json.loads(ds.source)
        return src.get("uri") or src.get("path") or ds.source
    except (ValueError, TypeError, AttributeError):
        return str(ds.source)


def _walk_model(client, name: str, version: str, depth: int, seen: set[str], out: list[tuple[int, str]]) -> None:
    mv = _model_version(client, name, str(version))
    out.append((depth, f"model {name} version {mv.version} (aliases: {', '.join(mv.aliases) or '-'}) {mv.source}"))
    run_id = _source_run_id(client, mv)
    if run_id is None:
        out.append((depth + 1, "(no source run recorded)"))
        return
    _walk_run(client, client.get_run(run_id), depth + 1, seen, out)


def lineage_chain(model_name: str, version: str, tracking_uri: str) -> list[tuple[int, str]]:
    """(depth, description) lines from the model version down to the datasets with no producer (the feedback)."""
    client = _client(tracking_uri)
    out: list[tuple[int, str]] = []
    _walk_model(client, model_name, str(version), 0, set(), out)
    return out
