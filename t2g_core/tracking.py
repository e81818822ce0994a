"""Where a stage and its trainers report: one protocol, and the trackers the library itself ships.

The library only calls a :class:`Tracker`; what the calls do belongs to the caller: in the pipeline an MLflow run
(``t2g_mlflow.tracker.MlflowTracker``), on the command line a line now and then (``t2g_cli``), by default nothing
(:class:`NullTracker`). ``context`` of a dataset input says what the stage read it for (``annotation``,
``training``, ``eval``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from t2g_core.store import ArtifactRef


class Tracker(Protocol):
    """Metrics, files, parameters, and the datasets a stage read and wrote."""

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...

    def log_input(self, ref: ArtifactRef, name: str, context: str) -> None: ...

    def log_output(self, ref: ArtifactRef, name: str) -> None: ...

    def log_params(self, params: Mapping[str, str]) -> None: ...


class NullTracker(Tracker):
    """Discards everything (the default): it keeps the protocol's methods, which do nothing."""


class MemoryTracker:
    """Keeps what was logged in lists (tests and benchmarks)."""

    def __init__(self) -> None:
        self.metrics: list[tuple[int | None, dict[str, float]]] = []
        self.artifacts: list[Path] = []
        self.inputs: list[tuple[str, str]] = []  # (name, context)
        self.outputs: list[str] = []
        self.params: dict[str, str] = {}

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.metrics.append((step, dict(metrics)))

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.artifacts.append(Path(path))

    def log_input(self, ref: ArtifactRef, name: str, context: str) -> None:
        self.inputs.append((name, context))

    def log_output(self, ref: ArtifactRef, name: str) -> None:
        self.outputs.append(name)

    def log_params(self, params: Mapping[str, str]) -> None:
        self.params.update(params)
