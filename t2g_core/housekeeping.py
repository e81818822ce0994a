"""Collecting what killed writers leave behind: stale temporary files and folders in a workspace.

Every write in the workspace goes through a hidden temporary name that is unique to its writer and renamed into place
when complete (``.<name>.tmp-<pid>-<random>``; a broken artifact or a replaced checkpoint set aside is
``.<name>.broken-...`` / ``.<name>.old-...``). A writer that
is killed leaves its temporary behind, and no later writer reuses the name, so :func:`collect_stale_temporaries`
removes those older than a few hours at the start of a run (``STALE_HOURS``): a live writer's
temporary is minutes old, a killed one's is never touched again. The inbox's drop folder is not walked: what lies
there is the people's who dropped it, not a writer's of this workspace.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from t2g_core.workspace import Workspace

# .<name>.tmp-<writer> / .<name>.broken-<writer>, and the fixed `.<name>.tmp` staging names of earlier versions
STALE_HOURS = 24.0  # a temporary this old was left by a killed writer, not a live one
TEMPORARY = re.compile(r"^\..+\.(tmp|broken|old)(-[\w.-]+)?$")


def stale_temporaries(root: str | Path, older_than_s: float, now: float | None = None) -> list[Path]:
    """Temporary files and folders under ``root`` last modified more than ``older_than_s`` seconds ago."""
    now = time.time() if now is None else now
    found: list[Path] = []
    drop_folder = Workspace(Path(root)).inbox
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(folder) / d != drop_folder]
        for name in [*dirs, *files]:
            path = Path(folder) / name
            if not TEMPORARY.match(name):
                continue
            try:
                age = now - path.lstat().st_mtime
            except FileNotFoundError:  # its writer finished (renamed it) meanwhile
                continue
            if age > older_than_s:
                found.append(path)
        dirs[:] = [d for d in dirs if not TEMPORARY.match(d)]  # a temporary folder's contents go with it
    return sorted(found)


def collect_stale_temporaries(root: str | Path, older_than_hours: float = STALE_HOURS) -> list[Path]:
    """Remove the stale temporaries under ``root`` (see :func:`stale_temporaries`); returns what was removed."""
    removed = []
    for path in stale_temporaries(root, older_than_hours * 3600):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed
