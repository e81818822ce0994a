"""Content-addressed caching of stage tasks: resume a failed or repeated pipeline without recomputation.

The cache key of a stage task is a hash of
- the task name and ``CODE_VERSION`` (bump it to invalidate every cached stage) plus the task function's source,
- its config parameters (canonical JSON of the pydantic models),
- the *content* sha256 of its input artifacts (an ``ArtifactRef`` dict contributes its ``sha256``; a path contributes
  the hash of the file or folder it names),
and never the flow-run id, so both a Prefect "Retry" of a failed run and a brand-new run with the same inputs find the
completed stages. Results are small JSON (``ArtifactRef`` dicts) persisted under ``<workspace>/prefect-results`` through
a saved ``local-file-system`` block (an unsaved block instance is refused by Prefect), so deleting the workspace drops
its cache too. Stage outputs live at key-addressed paths (``t2g_core.store``), so a cached path is never overwritten.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefect import Task
    from prefect.context import TaskRunContext

CODE_VERSION = "2026.11.1"
RESULTS_DIR = "prefect-results"
CACHE_EXPIRATION = timedelta(days=90)
_BIG_FILE = 64 << 20  # files above this are identified by (size, mtime) instead of their content
_blocks: dict[str, str] = {}


def fingerprint(value: Any) -> Any:
    """A JSON-able stand-in for one task parameter: content hashes for artifacts and paths, canonical JSON otherwise."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, Mapping):
        if "sha256" in value and "path" in value:  # an ArtifactRef dict: its content is what matters, not its path
            return {"artifact_sha256": value["sha256"]}
        return {str(k): fingerprint(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [fingerprint(v) for v in value]
    if hasattr(value, "sha256") and hasattr(value, "to_dict"):  # an ArtifactRef
        return {"artifact_sha256": value.sha256}
    if isinstance(value, (str, Path)) and len(str(value)) < 4096:
        digest = content_digest(str(value))
        if digest is not None:
            return {"path_sha256": digest}
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


_MODEL_FILES = ("config.json", "adapter_config.json", "tokenizer.json", "tokenizer_config.json")


def content_digest(text: str) -> str | None:
    """The content hash behind a path-like string: a file, an artifact folder or a model folder; else None.

    Any other folder (a workspace root, say) is left as its name: its contents change as stages write into it.
    """
    try:
        path = Path(text)
        if not (("/" in text or path.suffix) and path.exists()):
            return None
        if path.is_file():
            return _file_sha(path)
        if (path / "manifest.json").is_file():
            return json.loads((path / "manifest.json").read_text(encoding="utf-8"))["sha256"]
        if any((path / name).is_file() for name in _MODEL_FILES):
            return path_digest(path)
    except (OSError, ValueError, KeyError):
        return None
    return None


def path_digest(path: Path) -> str:
    """sha256 of a file, or of a folder's (relative path, content hash) list; huge files by size and mtime."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        rel = f.name if f == path else str(f.relative_to(path))
        h.update(rel.encode())
        stat = f.stat()
        if stat.st_size > _BIG_FILE:
            h.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
        else:
            h.update(_file_sha(f).encode())
    return h.hexdigest()


def _file_sha(path: Path) -> str:
    from t2g_core.store import sha256_file

    return sha256_file(path)


def _source_digest(fn: Any) -> str:
    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn))


def stage_cache_key(ctx: TaskRunContext, params: dict[str, Any]) -> str:
    """Prefect ``cache_key_fn``: task name + code version + task source + config + input content hashes."""
    parts = {
        "task": ctx.task.name,
        "code_version": CODE_VERSION,
        "task_source": _source_digest(ctx.task.fn),
        "params": {k: fingerprint(v) for k, v in sorted(params.items())},
    }
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return f"{ctx.task.name}-{hashlib.sha256(blob.encode()).hexdigest()[:32]}"


def results_path(workspace_root: str | Path) -> Path:
    return Path(workspace_root).resolve() / RESULTS_DIR


def results_block(workspace_root: str | Path) -> str:
    """Save (once per process) a ``local-file-system`` block for ``<workspace>/prefect-results``; returns its slug."""
    root = results_path(workspace_root)
    name = f"t2g-results-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}"
    if name not in _blocks:
        from prefect.filesystems import LocalFileSystem

        root.mkdir(parents=True, exist_ok=True)
        LocalFileSystem(basepath=str(root)).save(name, overwrite=True)
        _blocks[name] = f"local-file-system/{name}"
    return _blocks[name]


def cached(task: Task, workspace_root: str | Path, *, refresh: bool = False) -> Task:
    """``task`` with the content-addressed cache, JSON results in the workspace, and optionally a forced refresh."""
    return task.with_options(
        cache_key_fn=stage_cache_key,
        cache_expiration=CACHE_EXPIRATION,
        persist_result=True,
        result_serializer="json",
        result_storage=results_block(workspace_root),
        refresh_cache=refresh,
    )


def forced() -> bool:
    """True inside a task run that ``refresh`` forced (``t2g run --refresh STAGE``, or the UI's ``refresh`` parameter).

    Such a stage recomputes: it must not reuse what an earlier run left on disk under the same key (checkpoints to
    resume from, a finished evaluation, built models), or the refresh would only replay the old result.
    """
    from prefect.context import TaskRunContext
    from prefect.settings import PREFECT_TASKS_REFRESH_CACHE

    ctx = TaskRunContext.get()
    if ctx is None:
        return False
    # Prefect's own rule: the task's option, else the global setting (PREFECT_TASKS_REFRESH_CACHE=true)
    return bool(ctx.task.refresh_cache if ctx.task.refresh_cache is not None else PREFECT_TASKS_REFRESH_CACHE.value())


def clear_if_forced(path: str | Path) -> None:
    """Remove ``path`` (a stage's keyed output folder) when this task run was forced, so the stage starts afresh."""
    import shutil

    if forced() and Path(path).exists():
        shutil.rmtree(path)


def stage_task_options(
    timeout_s: float, *, retries: int = 0, retry_delays: list[float] | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``@task`` of a stage: cache key, JSON results, timeout, retries only where asked.

    Flows re-apply :func:`cached` so that results land in the run's workspace; this default keeps the same key
    when a task is called on its own.
    """
    opts: dict[str, Any] = {
        "cache_key_fn": stage_cache_key,
        "cache_expiration": CACHE_EXPIRATION,
        "persist_result": True,
        "result_serializer": "json",
        "timeout_seconds": timeout_s,
    }
    if retries:
        opts.update(retries=retries, retry_delay_seconds=retry_delays or [10, 60, 300][:retries])
    return opts
