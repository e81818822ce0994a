"""The tracker protocol the trainer logs through; tasks pass an MLflow implementation, the library ships a null one."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Tracker(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

    def log_artifact(self, path: str | Path) -> None: ...


class NullTracker:
    """Discards everything (the default)."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        return None

    def log_artifact(self, path: str | Path) -> None:
        return None


class MemoryTracker:
    """Keeps what was logged in lists (tests and benchmarks)."""

    def __init__(self) -> None:
        self.metrics: list[tuple[int | None, dict[str, float]]] = []
        self.artifacts: list[Path] = []

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.metrics.append((step, dict(metrics)))

    def log_artifact(self, path: str | Path) -> None:
        self.artifacts.append(Path(path))
