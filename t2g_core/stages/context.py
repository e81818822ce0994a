"""What a stage function gets besides its inputs and settings: where to write, its key, how to report.

The **stage key** hashes the stage's code (``t2g_core.codehash``), its settings and its inputs' fingerprints, and
names every output, so a change to any of them writes new outputs and the same inputs find theirs again; the
stage's Prefect cache key is the same hash. Outputs go through a sink: :class:`KeyedSink` (key-addressed folders in
a workspace) or :class:`PathSink` (where a command-line user asked).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from t2g_core.locks import folder_lock
from t2g_core.progress import Progress, no_progress
from t2g_core.schemas import SCHEMAS, validate_frame
from t2g_core.store import ArtifactRef, ArtifactStore, content_sha256, sha256_file, write_parquet, write_text_atomic
from t2g_core.tracking import NullTracker, Tracker
from t2g_core.workspace import Workspace


def fingerprint(value: Any) -> Any:
    """A JSON-able identity of one stage parameter: refs by content, configs by value."""
    if hasattr(value, "fingerprint"):
        return value.fingerprint()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, Mapping):
        if "sha256" in value and "path" in value:  # an artifact reference as a plain dict: its content
            return {"sha256": value.get("content_sha256") or value["sha256"]}
        return {str(k): fingerprint(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [fingerprint(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def stage_key(name: str, code: str, params: Mapping[str, Any]) -> str:
    """``<name>-<hash>`` of the stage name, the code digest ``code`` (``t2g_core.codehash``) and the parameters'
    fingerprints."""
    parts = {"stage": name, "code": code, "params": fingerprint(dict(params))}
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:24]}"


class Sink(Protocol):
    def artifact(self, name: str, df: pd.DataFrame, schema: str, extra: Mapping[str, Any] | None = None) -> ArtifactRef:
        """Write ``df`` (validated against ``schema``) as the artifact ``name``; returns its reference."""
        ...

    def folder(self, area: str) -> Path:
        """This stage's own folder in ``area`` (``checkpoints/ppo``, ``reports/evaluate``...), not yet created."""
        ...


@dataclass(frozen=True)
class KeyedSink:
    """Key-addressed outputs in a workspace: ``artifacts/<name>/<key>/`` and ``<area>/<key>/``."""

    workspace: Workspace
    key: str

    def artifact(self, name: str, df: pd.DataFrame, schema: str, extra: Mapping[str, Any] | None = None) -> ArtifactRef:
        return self.workspace.store.write(name, self.key, df, schema, extra=extra)

    def folder(self, area: str) -> Path:
        return self.workspace.root / area / self.key


@dataclass(frozen=True)
class PathSink:
    """Outputs where a user asked: a ``.parquet`` (or ``.jsonl`` / ``.csv``) file, or a folder holding artifacts."""

    path: Path
    key: str

    def artifact(self, name: str, df: pd.DataFrame, schema: str, extra: Mapping[str, Any] | None = None) -> ArtifactRef:
        if self.path.suffix in (".parquet", ".jsonl", ".csv"):
            return write_file(df, self.path, schema, extra)
        return ArtifactStore(self.path.parent).write(self.path.name, self.key, df, schema, extra=extra)

    def folder(self, area: str) -> Path:
        return self.path


def write_file(df: pd.DataFrame, path: Path, schema: str, extra: Mapping[str, Any] | None = None) -> ArtifactRef:
    """``df`` as one file (Parquet validated and written atomically; JSONL or CSV after validation), plus each
    mapping in ``extra`` beside it as ``<stem>.<name>.json`` (``spans.metrics.json``, ``annotations.stats.json``)."""
    if path.suffix == ".parquet":
        write_parquet(df, path, schema)
    else:
        df = validate_frame(df, SCHEMAS[schema], str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        text = (
            df.to_json(orient="records", lines=True, force_ascii=False)
            if path.suffix == ".jsonl"
            else df.to_csv(index=False)
        )
        write_text_atomic(path, text)
    for name, value in (extra or {}).items():
        if isinstance(value, Mapping):
            write_text_atomic(path.with_suffix(f".{name}.json"), json.dumps(dict(value), indent=2, default=str))
    digest = sha256_file(path)
    content = content_sha256(df, schema)  # without timings
    return ArtifactRef(
        path=str(path), sha256=digest, n_rows=len(df), schema=schema, key=digest[:20], content_sha256=content
    )


def _silent(_message: str) -> None:
    return None


@dataclass(frozen=True)
class StageContext:
    """Everything a stage function needs besides its inputs and settings."""

    workspace: Workspace
    key: str
    out: Sink
    force: bool = False  # recompute: do not reuse what an earlier run left under this key (checkpoints, results)
    tracker: Tracker = field(default_factory=NullTracker)
    log: Callable[[str], None] = _silent
    progress: bool = False  # draw the console progress bars of libraries that have their own (annotators)
    on_progress: Progress = no_progress  # how far a long loop is (model building, reward-model training, PPO)
    run_id: str | None = None  # the tracking run this stage reports to, recorded on its outputs for lineage

    def produced(self, ref):
        """``ref`` stamped with this stage's tracking run (a no-op outside tracking)."""
        return ref.model_copy(update={"run_id": self.run_id}) if self.run_id else ref

    @classmethod
    def keyed(cls, workspace: str | Path | Workspace, key: str, **kwargs: Any) -> StageContext:
        ws = workspace if isinstance(workspace, Workspace) else Workspace.at(workspace)
        return cls(workspace=ws, key=key, out=KeyedSink(ws, key), **kwargs)

    @classmethod
    def at_path(cls, workspace: str | Path | Workspace, key: str, path: str | Path, **kwargs: Any) -> StageContext:
        """Outputs at ``path``; the workspace (answer caches) is not created here, only used if a stage needs it."""
        ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace).resolve())
        return cls(workspace=ws, key=key, out=PathSink(Path(path), key), **kwargs)

    def reusable(self, name: str) -> ArtifactRef | None:
        """The complete artifact ``name`` an earlier run of this stage wrote under its key, or None (none there, the
        stage forced, or its outputs going to a path a user named)."""
        if self.force or not isinstance(self.out, KeyedSink):
            return None
        return self.workspace.store.find(name, self.key)

    def fresh_folder(self, area: str) -> Path:
        """``out.folder(area)``, emptied first when the stage is forced."""
        folder = self.out.folder(area)
        if self.force and folder.exists():
            shutil.rmtree(folder)
        return folder

    @contextlib.contextmanager
    def own_folder(self, area: str, *, fresh: bool = False) -> Iterator[Path]:
        """``out.folder(area)`` (emptied first when ``fresh`` and forced) while this stage is its one writer: a second
        run of the same key fails at once with :class:`~t2g_core.locks.Busy`; a distributed launch's first process
        holds it."""
        folder = self.out.folder(area)
        with one_writer(folder, self.run_id or f"{self.key} (command line)"):
            yield self.fresh_folder(area) if fresh else folder


def first_process() -> bool:
    """False in the processes of a distributed launch other than the first (torch.distributed is read only when a
    stage already imported it)."""
    import sys

    dist = sys.modules.get("torch.distributed")
    return dist is None or not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def one_writer(folder: Path, owner: str):
    """The one-writer lock of ``folder`` (``t2g_core.locks``), held by the first process of a distributed launch."""
    return folder_lock(folder, owner) if first_process() else contextlib.nullcontext()


class GateFailed(Exception):
    """A stage stopped at a quality gate. The message names the setting that relaxes the gate and the likely cause;
    the same command stops the same way until that setting or the data changes."""
