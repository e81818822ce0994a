"""t2g_core is a pure library: importing every module pulls in neither prefect nor mlflow, and reads no env vars."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import t2g_core

ROOT = Path(t2g_core.__file__).parent


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages([str(ROOT)], prefix="t2g_core."))


@pytest.mark.slow  # a fresh interpreter importing every t2g_core module
def test_core_imports_neither_prefect_nor_mlflow():
    code = (
        "import importlib, sys\n"
        f"for m in {_modules()!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = [m for m in ('prefect', 'mlflow') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"t2g_core pulled in: {out.stdout.strip()}"


def test_core_reads_no_environment_variables():
    offenders = []
    for path in ROOT.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "os.environ" in text or "os.getenv" in text or "getenv(" in text:
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == [], f"t2g_core reads environment variables in {offenders}"
