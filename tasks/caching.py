"""Content-addressed caching of stage tasks: resume a failed or repeated pipeline without recomputation.

The cache key of a stage task (``stage_cache_key``) is the stage key of ``t2g_core.stages.context``: a hash of
- the code the task runs: its module and every first-party module it imports, docstrings and comments excluded
  (``t2g_core.codehash``), so a change to library code re-runs exactly the stages that run it, and nothing is bumped
  by hand;
- its settings (the config sections the stage reads, ``t2g_core.config.stages``) by value;
- its inputs by content (a reference's ``fingerprint()``: the sha256 of an artifact, the digest of a model folder),
and never the flow-run id or the workspace, so both a Prefect "Retry" of a failed run and a brand-new run with the
same inputs find the completed stages. The same key names the stage's output folders, so a stage that runs again
after a code change writes new outputs instead of finding the old ones. Results are small JSON (typed references)
persisted under ``<workspace>/prefect-results`` through a saved ``local-file-system`` block (an unsaved block instance
is refused by Prefect), so deleting the workspace drops its cache too.

A cached result is a reference to files, and is reused only while they are intact: before Prefect looks the key up,
:func:`drop_broken_record` asks the stored reference for its ``problem()`` (a deleted report folder, a summary cut
short, a 4-byte Parquet file) and, when it has one, expires the record with a log line, so the stage runs again
instead of being reported ``Cached``. A record written before the workspace folder was moved names files in the old
folder: it is rewritten with their new place first (``t2g_core.workspace.relocated``), so a moved workspace still
reuses its cache.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t2g_core.codehash import function_digest
from t2g_core.stages.context import stage_key
from t2g_core.store import ArtifactRef
from t2g_core.workspace import relocated

if TYPE_CHECKING:
    from prefect import Task
    from prefect.context import TaskRunContext
    from prefect.filesystems import LocalFileSystem

RESULTS_DIR = "prefect-results"
CACHE_EXPIRATION = timedelta(days=90)
NOT_IN_KEY = ("workspace", "layout")  # where outputs go and how many processes make them, not what they are
_CACHE_OPTIONS: dict[str, Any] = {
    "cache_expiration": CACHE_EXPIRATION,
    "persist_result": True,
    "result_serializer": "json",
}
_blocks: dict[str, LocalFileSystem] = {}


def task_key(fn: Any, params: dict[str, Any]) -> str:
    """The stage key of task ``fn`` called with ``params``, named after the task (the stage's name; a bare function:
    after the function)."""
    name = getattr(fn, "name", None) or fn.__name__.lstrip("_")
    fn = getattr(fn, "fn", fn)
    keyed = {"function": fn.__qualname__, **{k: v for k, v in params.items() if k not in NOT_IN_KEY}}
    return stage_key(name, function_digest(fn), keyed)


def stage_cache_key(ctx: TaskRunContext, params: dict[str, Any]) -> str:
    """Prefect ``cache_key_fn``: :func:`task_key` of the running task (its record expired first if its files broke)."""
    key = task_key(ctx.task, params)
    drop_broken_record(ctx, key)
    return key


def result_problem(value: Any, within: Path | None = None) -> str | None:
    """Why a cached result (a stage reference, a plain-dict artifact reference, or a tuple of them) cannot be
    reused, or None; only its files under ``within`` (the workspace) are checked."""
    if hasattr(value, "problem"):
        return value.problem(within)
    if isinstance(value, dict) and {"path", "sha256", "n_rows", "key"} <= set(value):
        return ArtifactRef.model_validate(value).problem(within)
    if isinstance(value, (list, tuple)):
        return next((p for p in (result_problem(v, within) for v in value) if p), None)
    return None


def drop_broken_record(ctx: TaskRunContext, key: str) -> None:
    """Expire the cached record of ``key`` when the files its result names are missing or broken (logged); a record
    written before the workspace folder moved is rewritten with its paths in the folder's new place."""
    store = getattr(ctx, "result_store", None)
    if store is None or not store.exists(key):
        return
    basepath = getattr(store.result_storage, "basepath", None)  # <workspace>/prefect-results
    within = Path(basepath).expanduser().parent if basepath else None
    try:
        record = store.read(key)
        value = record.result if within is None else relocated(record.result, within)
        if value is not record.result:
            store.write(obj=value, key=key, expiration=record.metadata.expiration)
        problem = result_problem(value, within)
    except Exception as exc:  # noqa: BLE001 - a record that cannot be read back is not a cache hit either
        problem = f"its record cannot be read ({type(exc).__name__}: {exc})"
    if problem is None:
        return
    from prefect import get_run_logger

    get_run_logger().warning(
        "%s: the cached result is not reused (%s); running the stage again", ctx.task.name, problem
    )
    store.write(obj=None, key=key, expiration=datetime.now(UTC) - timedelta(seconds=1))


def results_path(workspace_root: str | Path) -> Path:
    return Path(workspace_root).resolve() / RESULTS_DIR


def results_block(workspace_root: str | Path) -> LocalFileSystem:
    """Save (once per process) a ``local-file-system`` block for ``<workspace>/prefect-results`` and return it. The
    saved block itself, not its slug: Prefect reads a slug back from the API at every task start."""
    root = results_path(workspace_root)
    name = f"t2g-results-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}"
    if name not in _blocks:
        from prefect.filesystems import LocalFileSystem

        root.mkdir(parents=True, exist_ok=True)
        block = LocalFileSystem(basepath=str(root))
        block.save(name, overwrite=True)
        _blocks[name] = block
    return _blocks[name]


def cached(
    task: Task, workspace_root: str | Path, *, refresh: bool = False, limit_s: float | None = None, on_limit: str = ""
) -> Task:
    """``task`` with the content-addressed cache, JSON results in the workspace, optionally a forced refresh, and a
    time limit ``limit_s`` (None: the task's own, which for stage tasks is none) whose failure logs ``on_limit``."""
    options: dict[str, Any] = {}
    if limit_s is not None:
        options = {"timeout_seconds": limit_s, "on_failure": [_explain_timeout(on_limit)]}
    return task.with_options(
        cache_key_fn=stage_cache_key,
        result_storage=results_block(workspace_root),
        refresh_cache=refresh,
        **_CACHE_OPTIONS,
        **options,
    )


def _explain_timeout(message: str):
    """A task ``on_failure`` hook: when the run was stopped by its time limit, log which setting stopped it and add
    that as a note to the exception (the flows and ``t2g run`` report it with the failure)."""

    def hook(task, task_run, state) -> None:
        if state.name != "TimedOut":
            return
        from prefect.logging import get_run_logger

        get_run_logger().error(message)
        exc = state.result(raise_on_failure=False)
        if isinstance(exc, BaseException) and message not in getattr(exc, "__notes__", ()):
            exc.add_note(message)

    return hook


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


def stage_task_options(
    timeout_s: float | None = None, *, retries: int = 0, retry_delays: list[float] | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``@task`` of a stage: cache key, JSON results, retries only where asked, and no time
    limit unless ``timeout_s`` (the pipeline's limits are ``config.timeouts``, applied by :func:`cached`: how long a
    stage takes depends on the machine and the data, so no fixed cap fits every run).

    Flows re-apply :func:`cached` so that results land in the run's workspace; this default keeps the same key
    when a task is called on its own.
    """
    opts: dict[str, Any] = {"cache_key_fn": stage_cache_key, **_CACHE_OPTIONS, "timeout_seconds": timeout_s}
    if retries:
        opts.update(retries=retries, retry_delay_seconds=retry_delays or [10, 60, 300][:retries])
    return opts
