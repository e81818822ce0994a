"""The model registry: model folders logged, registered and aliased; ``champion`` promoted; versions fetched back.

Adapters are logged as MLflow-3 external LoggedModels (the folder as artifacts), registered and aliased. Never
``mlflow.transformers.log_model`` on a PEFT model: its base weights come back re-initialised.
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t2g_core.locks import folder_lock
from t2g_mlflow.experiment import configure
from t2g_mlflow.runs import flatten_params
from t2g_mlflow.tags import (
    DIRECTION_TAG,
    HIGHER,
    LOWER,
    METRIC_TAG,
    MODEL_TAG_PREFIX,
    PREFECT_TAG_PREFIX,
    SOURCE_RUN_TAG,
    USES_TAG_PREFIX,
)

if TYPE_CHECKING:
    from t2g_core.config import WorkspaceConfig

CHAMPION = "champion"
REGISTRY_PREFIX = "models:/"
LOGGED_MODEL_PREFIX = "models:/m-"  # a version's source when it was registered from a LoggedModel
LEDGER = "registered.json"  # <workspace>/models/: the score this workspace measured for each version it registered


def log_adapter_model(
    adapter_dir: str | Path,
    registered_name: str,
    params: Mapping[str, Any] | None = None,
    metrics: Mapping[str, float] | None = None,
    alias: str | None = "candidate",
    model_type: str = "peft-adapter",
    metrics_by_step: Mapping[int, Mapping[str, float]] | None = None,
) -> str:
    """Log a model folder (a PEFT adapter, or a span tagger's folder: ``model_type``) as an external LoggedModel of
    the active run (tagged with that run's Prefect ids), with its ``metrics`` (and ``metrics_by_step``: step ->
    metrics), register it and set ``alias``.

    Returns the registered model version. Load it back with :func:`resolve_model_ref`
    (``models:/NAME@ALIAS``).
    """
    import mlflow
    from mlflow import MlflowClient

    active = mlflow.active_run()
    source_run = active.info.run_id if active else None
    lm = mlflow.create_external_model(
        name=registered_name,
        source_run_id=source_run,
        params=flatten_params(params or {}),
        tags={k: v for k, v in active.data.tags.items() if k.startswith(PREFECT_TAG_PREFIX)} if active else {},
        model_type=model_type,
    )
    client = MlflowClient()
    client.log_model_artifacts(lm.model_id, str(adapter_dir))
    for step, values in [(0, metrics or {}), *(metrics_by_step or {}).items()]:
        for key, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                mlflow.log_metric(key, float(value), step=step, model_id=lm.model_id)
    mv = mlflow.register_model(
        f"{REGISTRY_PREFIX}{lm.model_id}", registered_name, tags={SOURCE_RUN_TAG: source_run or ""}
    )
    if alias:
        client.set_registered_model_alias(registered_name, alias, mv.version)
    if active:
        mlflow.set_tag(f"{MODEL_TAG_PREFIX}{registered_name}", str(mv.version))
    return str(mv.version)


def log_model_input(registered_name: str, version: str | int) -> None:
    """Record that the active run consumed a registered model version (e.g. PPO uses the reward model)."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import LoggedModelInput

    mv = MlflowClient().get_model_version(registered_name, str(version))
    from_logged = mv.source.startswith(LOGGED_MODEL_PREFIX)
    model_id = mv.model_id or (mv.source.removeprefix(REGISTRY_PREFIX) if from_logged else None)
    if model_id:
        mlflow.log_input(model=LoggedModelInput(model_id))
    mlflow.set_tag(f"{USES_TAG_PREFIX}{registered_name}", str(version))


def metric_tag(metric: str) -> str:
    """``t2g.metric.<metric>`` with the characters tag names refuse replaced (pass@1 -> pass_1)."""
    return METRIC_TAG + re.sub(r"[^\w.\- /:]", "_", metric)


def promote_if_better(
    name: str,
    version: str,
    metric: str,
    value: float | None,
    workspace: WorkspaceConfig,
    *,
    lower_is_better: bool = False,
    eligible: bool = True,
) -> bool:
    """Tag the version with its metric as measured (``t2g.metric.<metric>``) and its direction
    (``t2g.metric.direction``); move alias ``champion`` to it when it is ``eligible`` and beats the champion (or none
    exists). ``eligible=False`` records a version that may not be promoted (its evaluation verdict was not "better").

    The champion's score is the one this workspace's pipeline measured, kept in ``<workspace>/models/registered.json``
    with the version's source (its logged model), never a tag: tags and aliases are anyone's to set who reaches the
    tracking server, so a forged tag cannot block promotion, and a champion this workspace did not register counts as
    none.
    """
    from mlflow import MlflowClient

    from t2g_core.store import read_json, write_text_atomic  # t2g_core.store and .workspace load pandas
    from t2g_core.workspace import Workspace

    client = MlflowClient()
    tag = metric_tag(metric)
    client.set_model_version_tag(name, version, tag, "none" if value is None else str(value))
    client.set_model_version_tag(name, version, DIRECTION_TAG, LOWER if lower_is_better else HIGHER)
    if value is None or not eligible:
        return False
    ledger = Workspace.at(workspace.root).models / LEDGER
    with folder_lock(ledger, f"model registry scores (pid {os.getpid()})", wait_s=120):
        scores = read_json(ledger) if ledger.exists() else {}
        mine = scores.setdefault(name, {})
        score = -value if lower_is_better else value
        best = _champion_score(name, mine, tag)
        promoted = best is None or score > best
        mine[str(version)] = {"source": client.get_model_version(name, version).source, "metric": tag, "score": score}
        write_text_atomic(ledger, json.dumps(scores, indent=2))
        if promoted:
            client.set_registered_model_alias(name, CHAMPION, version)
    return promoted


def _champion_score(name: str, mine: Mapping[str, dict], tag: str) -> float | None:
    """The champion's score (higher is better) as this workspace measured it; None when there is no champion, or it is
    a version this workspace did not register or scored on another metric."""
    champion = _aliased(name, CHAMPION)
    if champion is None:
        return None
    entry = mine.get(str(champion.version))
    if entry is None or entry["source"] != champion.source or entry["metric"] != tag:
        return None
    return entry["score"]


def _aliased(name: str, alias: str):
    """The model version ``alias`` points at, or None (no such model or alias)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        return MlflowClient().get_model_version_by_alias(name, alias)
    except MlflowException:
        return None


def alias_version(name: str, alias: str) -> str | None:
    """The version ``alias`` points at, or None (no such model or alias)."""
    found = _aliased(name, alias)
    return str(found.version) if found is not None else None


def champion_metric(name: str, metric: str) -> tuple[str, float | None] | None:
    """(version, ``metric`` as measured on it) of the champion, or None when there is none."""
    found = _aliased(name, CHAMPION)
    if found is None:
        return None
    value = _as_float(found.tags.get(metric_tag(metric)))
    return str(found.version), value if math.isfinite(value) else None


def _as_float(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "none") else -math.inf
    except ValueError:
        return -math.inf


def describe_version(name: str, version: str, text: str, tags: Mapping[str, str] | None = None) -> None:
    """The version's description (shown on its page in the MLflow UI) and any extra readable tags."""
    from mlflow import MlflowClient

    client = MlflowClient()
    client.update_model_version(name, version, description=text)
    for key, value in (tags or {}).items():
        client.set_model_version_tag(name, version, key, value)


def resolve_model_ref(ref: str, workspace: WorkspaceConfig) -> Path:
    """A folder as is; ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION`` is fetched from the MLflow model registry
    (once per version) into ``<workspace>/models/registry/NAME/vVERSION`` and the model or adapter folder in it is
    returned."""
    if not ref.startswith(REGISTRY_PREFIX):
        return Path(ref)
    import mlflow
    from mlflow import MlflowClient

    from t2g_core.workspace import Workspace

    configure(workspace)
    spec = ref.removeprefix(REGISTRY_PREFIX)
    name, sep, alias = spec.partition("@")
    if sep:
        version = MlflowClient().get_model_version_by_alias(name, alias).version
    else:
        name, _, version = spec.partition("/")
    dst = Workspace.at(workspace.root).models / "registry" / re.sub(r"[^\w.-]", "_", name) / f"v{version}"
    if not dst.exists():
        tmp = dst.with_name(f".{dst.name}.tmp-{uuid.uuid4().hex[:8]}")  # concurrent fetches never share a folder
        mlflow.artifacts.download_artifacts(artifact_uri=f"{REGISTRY_PREFIX}{name}/{version}", dst_path=str(tmp))
        try:
            tmp.rename(dst)
        except OSError:  # another process finished the same version first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    found = [p.parent for p in sorted(dst.rglob("*config.json")) if p.name in ("adapter_config.json", "config.json")]
    if not found:
        raise ValueError(f"{ref}: version {version} holds no model or adapter folder (no config.json)")
    return found[0]
