"""A migrated, empty SQLite database kept once per library version in ``$XDG_CACHE_HOME/text2grad`` (else
``~/.cache/text2grad``): a new workspace's Prefect database and MLflow store start as a copy instead of migrating
(``t2g_cli.runtime``, ``t2g_mlflow.experiment``; ``deployments/up.sh``: ``python -m t2g_env.kept_databases``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path

from t2g_core.store import replace_atomic

SCRUB = {"prefect": "DELETE FROM configuration"}  # per library: what a copy leaves out (Prefect's telemetry session)
EMPTY = {"prefect": "flow_run", "mlflow": "runs"}  # a copy holds no run: one that does is neither used nor kept
Adapt = Callable[[sqlite3.Connection], object]


def kept_copy(library: str) -> Path:
    """Where ``library``'s (``prefect``, ``mlflow``) migrated, empty database of its installed version is kept."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "text2grad" / f"{library}-{version(library)}.db"


def place(database: Path, library: str, adapt: Adapt | None = None) -> bool:
    """Write the kept copy as the new ``database`` (``adapt`` then fits it to its new place); whether it did. A copy
    that cannot be written (a full disk) is skipped: the library makes its own database."""
    copy = kept_copy(library)
    if not _usable(copy, library):
        return False

    def write(tmp: Path) -> None:
        shutil.copyfile(copy, tmp)
        if adapt:
            with contextlib.closing(sqlite3.connect(tmp)) as db:
                adapt(db)
                db.commit()

    with contextlib.suppress(OSError, sqlite3.Error):
        replace_atomic(database, write)
        return True
    return False


def keep(database: Path, library: str) -> None:
    """Keep a copy of the migrated ``database`` when none is kept (read through SQLite: a server may hold part of it in
    its log), less what :data:`SCRUB` leaves out; written whole or not at all. A copy that cannot be written is not
    kept, and nothing fails."""
    copy = kept_copy(library)
    if _usable(copy, library) or not _usable(database, library):
        return

    def write(tmp: Path) -> None:
        with contextlib.closing(sqlite3.connect(database)) as source, contextlib.closing(sqlite3.connect(tmp)) as to:
            source.backup(to)
            if library in SCRUB:
                to.execute(SCRUB[library])
            to.commit()
            to.execute("PRAGMA journal_mode = DELETE")  # one file: no -wal or -shm beside it when it is read

    with contextlib.suppress(OSError, sqlite3.Error):  # else the next new workspace migrates its own database
        replace_atomic(copy, write)


def _usable(database: Path, library: str) -> bool:
    """Whether ``database`` is a readable database of ``library`` that holds no run (a kept copy made after runs were
    recorded would hand them to every new workspace)."""
    if not database.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"{database.as_uri()}?immutable=1", uri=True)) as db:
            return db.execute(f"SELECT count(*) FROM {EMPTY[library]}").fetchone() == (0,)
    except sqlite3.Error:
        return False


@contextlib.contextmanager
def seeded(database: Path, library: str, adapt: Adapt | None = None) -> Iterator[None]:
    """Around the first use of the new SQLite ``database`` by ``library``: it starts as the kept copy
    (:func:`place`); without one, the database the library made in the block is kept when it ends (:func:`keep`)."""
    placed = place(database, library, adapt)
    yield
    if not placed:
        keep(database, library)


if __name__ == "__main__":  # python -m t2g_env.kept_databases place|keep LIBRARY FILE (deployments/up.sh)
    action, library, file = sys.argv[1:]
    {"place": place, "keep": keep}[action](Path(file), library)
