"""Immutable, key-addressed Parquet artifacts with atomic writes.

Layout: ``<root>/<stage>/<key>/`` holding ``data.parquet`` (and any extra files) and ``manifest.json``, written last:
a folder without a manifest is not an artifact. A folder is written under a temporary name and renamed into place.
The key hashes the stage, its config and its inputs' content hashes (never a run id). The content hash leaves out the
columns the schema declares volatile (timings), so a run that only took longer is the same input downstream. What a
later run reuses is checked first (:meth:`ArtifactRef.problem`, :func:`read_json`); a broken one is written again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from t2g_core.schemas import SCHEMAS, ArtifactSchema, SchemaError, to_arrow, validate_frame, with_defaults

DATA_FILE = "data.parquet"
MANIFEST = "manifest.json"


class ArtifactRef(BaseModel):
    """What a stage returns for a Parquet artifact: where it lives and what it holds. Small and JSON-serialisable.

    Its identity (``fingerprint``) is the content hash, never the path: the same rows written elsewhere are the same
    input to the next stage. ``run_id`` names the tracking run that produced it, when one did (lineage).
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    path: str  # the artifact folder, or a plain file
    sha256: str  # content hash of the data file
    n_rows: int
    schema_name: str = Field(alias="schema")
    key: str
    run_id: str | None = None
    content_sha256: str | None = None  # hash of the rows without volatile columns; None: the same as sha256

    @property
    def data_path(self) -> str:
        p = Path(self.path)
        return str(p / DATA_FILE) if p.is_dir() or not p.suffix else str(p)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)

    def fingerprint(self) -> dict[str, str]:
        return {"sha256": self.content_sha256 or self.sha256}

    def paths(self) -> tuple[str, ...]:
        """The files and folders this reference names (what a stage that takes it reads)."""
        return (self.path,)

    def problem(self, within: Path | None = None) -> str | None:
        """Why this artifact cannot be reused (files missing or unreadable), or None when it can; with ``within``,
        only files under that folder are checked (see :func:`owned`)."""
        p = Path(self.path)
        if p.is_dir():
            return json_problem(p / MANIFEST, within) or parquet_problem(p / DATA_FILE, within)
        return parquet_problem(p, within) if p.suffix == ".parquet" else file_problem(p, within)

    @classmethod
    def of(cls, path: str | Path, schema: str) -> ArtifactRef:
        """A reference to an existing artifact folder or data file (e.g. a path given on the command line)."""
        p = Path(path)
        if (p / MANIFEST).is_file():
            return ref_from_manifest(p / MANIFEST)
        if p.is_file():
            digest = sha256_file(p)
            content = _file_content_sha256(p, schema) if p.suffix == ".parquet" else None
            return cls(path=str(p), sha256=digest, n_rows=-1, schema=schema, key=digest[:20], content_sha256=content)
        if p.is_dir():
            digest = _folder_digest(p)
            return cls(path=str(p), sha256=digest, n_rows=-1, schema=schema, key=digest[:20])
        raise FileNotFoundError(f"{p}: no such file or folder")


def _folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(x for x in folder.rglob("*") if x.is_file()):
        h.update(str(f.relative_to(folder)).encode())
        h.update(sha256_file(f).encode())
    return h.hexdigest()


class BrokenFile(ValueError):
    """A file a later run trusts is missing, cut short or not what it should be; the message names it."""


def read_json(path: str | Path) -> Any:
    """The JSON in ``path``; :class:`BrokenFile` naming the file when it is missing or not valid JSON (a write cut
    short by a full disk or a kill)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BrokenFile(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BrokenFile(f"{path}: not valid JSON ({exc})") from None


def owned(path: str | Path, within: Path | None) -> bool:
    """Whether ``path`` lies under ``within`` (always, when ``within`` is None). A cached reference is checked only for
    the files of its workspace, the outputs the pipeline wrote: a user's data file or a model cache elsewhere is
    theirs to keep."""
    return within is None or Path(path).resolve().is_relative_to(Path(within).resolve())


def file_problem(path: str | Path, within: Path | None = None) -> str | None:
    if not owned(path, within):
        return None
    return None if Path(path).is_file() else f"{path}: missing"


def json_problem(path: str | Path, within: Path | None = None) -> str | None:
    if not owned(path, within):
        return None
    try:
        read_json(path)
    except BrokenFile as exc:
        return str(exc)
    return None


def parquet_problem(path: str | Path, within: Path | None = None) -> str | None:
    """Why ``path`` is not a readable Parquet file (checked from its footer, without reading the data), or None."""
    if not owned(path, within):
        return None
    if not Path(path).is_file():
        return f"{path}: missing"
    try:
        pq.read_metadata(path)
    except (OSError, ValueError) as exc:
        return f"{path}: not a readable Parquet file ({exc})"
    return None


def content_sha256(df: pd.DataFrame, schema: str | ArtifactSchema) -> str | None:
    """sha256 of a frame's rows (already validated against ``schema``) without the schema's volatile columns, as
    canonical JSON; None when the schema has none (the data file's own hash identifies the content then)."""
    sch = SCHEMAS[schema] if isinstance(schema, str) else schema
    if all(not c.volatile for c in sch.columns):
        return None
    kept = sch.content
    rows = to_arrow(with_defaults(df, sch)[kept.names], kept).to_pylist()
    text = json.dumps([kept.names, rows], ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _file_content_sha256(path: Path, schema: str) -> str | None:
    """The content hash of a Parquet file of ``schema`` (None when it has no volatile columns or cannot be read:
    the file hash stands)."""
    sch = SCHEMAS.get(schema)
    if sch is None or all(not c.volatile for c in sch.columns):
        return None
    try:
        return content_sha256(read_artifact(path, sch), sch)
    except (SchemaError, KeyError):
        return None


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def stable_json(value: Any) -> str:
    """Canonical JSON of configs (pydantic models, dataclasses, dicts) for hashing."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def artifact_key(
    stage: str, config: Any = None, inputs: Mapping[str, str] | None = None, code_version: str = "1"
) -> str:
    """Hash of stage name, code version, config and input content hashes (``inputs``: name -> sha256)."""
    parts = [stage, code_version, stable_json(config), stable_json(dict(sorted((inputs or {}).items())))]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:20]


class ArtifactStore:
    """``<root>/<stage>/<key>/`` folders of validated Parquet plus a manifest."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def folder(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def find(self, stage: str, key: str) -> ArtifactRef | None:
        """The complete artifact at (stage, key), or None (also when its manifest or data is broken)."""
        folder = self.folder(stage, key)
        if not (folder / MANIFEST).exists() or json_problem(folder / MANIFEST) or parquet_problem(folder / DATA_FILE):
            return None
        return ref_from_manifest(folder / MANIFEST)

    def write(
        self,
        stage: str,
        key: str,
        df: pd.DataFrame,
        schema: str | ArtifactSchema,
        extra: Mapping[str, Any] | None = None,
        add_files: Callable[[Path], None] | None = None,
    ) -> ArtifactRef:
        """Validate and atomically write ``df``; ``add_files(tmp_dir)`` may add files before the manifest is written.

        If the artifact already exists (another process finished first) the existing one is returned.
        """
        existing = self.find(stage, key)
        if existing is not None:
            return existing
        final = self.folder(stage, key)
        tmp = final.parent / f".{key}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        tmp.mkdir(parents=True)
        try:
            write_parquet(df, tmp / DATA_FILE, schema)
            if add_files is not None:
                add_files(tmp)
            sch = SCHEMAS[schema] if isinstance(schema, str) else schema
            manifest = {
                "stage": stage,
                "key": key,
                "schema": sch.name,
                "sha256": sha256_file(tmp / DATA_FILE),
                "content_sha256": content_sha256(df, sch),
                "n_rows": len(df),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "extra": dict(extra or {}),
            }
            write_text_atomic(tmp / MANIFEST, json.dumps(manifest, indent=2, default=str))
            _set_aside_broken(final)
            try:
                os.rename(tmp, final)
            except OSError:  # lost a race: someone else completed the same key
                if self.find(stage, key) is None:
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return ref_from_manifest(final / MANIFEST)


def _set_aside_broken(final: Path) -> None:
    """Move a broken artifact folder at ``final`` out of the way (a complete one is never touched)."""
    if final.exists() and not (json_problem(final / MANIFEST) is None and parquet_problem(final / DATA_FILE) is None):
        broken = final.with_name(f".{final.name}.broken-{os.getpid()}-{uuid.uuid4().hex[:6]}")
        try:
            os.rename(final, broken)
        except FileNotFoundError:  # another writer moved it first
            return
        shutil.rmtree(broken, ignore_errors=True)


def ref_from_manifest(manifest: str | Path) -> ArtifactRef:
    m = read_json(manifest)
    return ArtifactRef(
        path=str(Path(manifest).parent),
        sha256=m["sha256"],
        n_rows=m["n_rows"],
        schema=m["schema"],
        key=m["key"],
        content_sha256=m.get("content_sha256"),
    )


def read_manifest(artifact: str | Path | ArtifactRef) -> dict[str, Any]:
    path = Path(artifact.path if isinstance(artifact, ArtifactRef) else artifact)
    if path.is_file():
        path = path.parent
    return read_json(path / MANIFEST)


def replace_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Replace ``path`` at once with what ``write(tmp)`` writes: readers see the old or the new content, never a part
    (temp file, fsync so the bytes are on disk before the name points at them, rename; the temp never outlives a
    failure)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once (:func:`replace_atomic`)."""
    replace_atomic(path, lambda tmp: tmp.write_bytes(text.encode("utf-8")))


def write_frame_atomic(df: pd.DataFrame, path: str | Path) -> Path:
    """``df`` (no declared schema) as Parquet at ``path``, atomically."""
    return replace_atomic(path, lambda tmp: df.to_parquet(tmp, index=False))


def write_parquet(df: pd.DataFrame, path: str | Path, schema: str | ArtifactSchema) -> Path:
    """Validate ``df`` and write it to ``path`` atomically."""
    sch = SCHEMAS[schema] if isinstance(schema, str) else schema
    table = to_arrow(validate_frame(df, sch, str(path)), sch)
    return replace_atomic(path, lambda tmp: pq.write_table(table, tmp))


def read_artifact(path: str | Path | ArtifactRef, schema: str | ArtifactSchema) -> pd.DataFrame:
    """Read and validate an artifact folder, its data.parquet, or any Parquet file."""
    sch = SCHEMAS[schema] if isinstance(schema, str) else schema
    p = Path(path.path if isinstance(path, ArtifactRef) else path)
    if p.is_dir():
        if not (p / MANIFEST).exists():
            raise SchemaError(str(p), "is not a complete artifact (no manifest.json): it may be a partial write")
        p = p / DATA_FILE
    try:
        df = pq.read_table(p).to_pandas()
    except (OSError, ValueError) as exc:
        raise SchemaError(str(p), f"cannot be read as Parquet: {exc}") from exc
    for col in sch.columns:  # list columns come back as numpy arrays
        if col.name in df.columns and str(col.type).startswith("list"):
            df[col.name] = [None if v is None else list(v) for v in df[col.name]]
    return validate_frame(df, sch, str(p))
