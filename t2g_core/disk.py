"""A full disk, said plainly: the error a stage raises when its writes fail for lack of space.

A full disk surfaces in many disguises: ``OSError: [Errno 28] No space left on device`` from a file write, a
quota's ``EDQUOT``, or, from the MLflow and Prefect SQLite stores, ``sqlite3.OperationalError: database or disk is
full`` wrapped by SQLAlchemy in a message about "autoflush" that names neither the disk nor the folder.
:func:`disk_full` looks through an exception's chain for any of them and returns a :class:`DiskFull` that names
the folder, its free space and what to do; the stage adapters raise it in place of the disguise. Some failures hide
the disk altogether (a server's HTTP 500 because its database could not grow): :func:`out_of_space` also names a
disk that is all but full as the likely cause of any failure.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
SQLITE_FULL = "database or disk is full"
ALL_BUT_FULL = 16 << 20  # bytes free under which a failure that names no disk is taken for a full disk


class DiskFull(OSError):
    """The disk (or quota) under a folder the pipeline writes is full; the message names it and its free space."""


def _chain(exc: BaseException):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        orig = getattr(exc, "orig", None)  # SQLAlchemy keeps the driver's error here
        if isinstance(orig, BaseException) and id(orig) not in seen:
            yield orig
            seen.add(id(orig))
        exc = exc.__cause__ or exc.__context__


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` or anything in its chain says the disk is full."""
    return any(
        isinstance(e, DiskFull) or (isinstance(e, OSError) and e.errno in NO_SPACE) or SQLITE_FULL in str(e)
        for e in _chain(exc)
    )


def free_bytes(folder: str | Path) -> int | None:
    path = Path(folder)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def disk_full(exc: BaseException, folder: str | Path) -> DiskFull | None:
    """A :class:`DiskFull` naming ``folder`` when ``exc`` is a full disk in disguise, else None."""
    if isinstance(exc, DiskFull) or not is_disk_full(exc):
        return None
    return _said(exc, folder, free_bytes(folder))


def out_of_space(exc: BaseException, folder: str | Path) -> DiskFull | None:
    """``exc`` itself when it is a :class:`DiskFull`, else :func:`disk_full`, else a :class:`DiskFull` naming
    ``folder`` when its disk has under ``ALL_BUT_FULL`` bytes free (whatever ``exc`` says), else None."""
    if isinstance(exc, DiskFull):
        return exc
    free = free_bytes(folder)
    if is_disk_full(exc) or (free is not None and free < ALL_BUT_FULL):
        return _said(exc, folder, free)
    return None


def _said(exc: BaseException, folder: str | Path, free: int | None) -> DiskFull:
    left = f"{free / (1 << 20):.1f} MiB free" if free is not None else "free space unknown"
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    return DiskFull(
        errno.ENOSPC,
        f"disk full: no space left on the device under {folder} ({left}); free some space and run the same command "
        f"again (finished stages are reused, training resumes from its last checkpoint). The error was: {first}",
    )
