"""Every benchmark runs at its ``--smoke`` size, so none can rot unseen (a crash fails the suite, not a README)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name.startswith(("bench_", "gpu_smoke")))


def test_every_benchmark_is_covered():
    assert {
        "bench_align.py",
        "bench_ppo_step.py",
        "bench_ppo_sample_efficiency.py",
        "bench_vs_trl.py",
        "bench_kl_stop.py",
    } <= set(SCRIPTS)


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_at_smoke_size(script):
    started = {p: p.stat().st_mtime_ns for p in (ROOT / "benchmarks" / "results" / "smoke").rglob("*.json")}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{script} --smoke failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    written = [
        p for p in (ROOT / "benchmarks" / "results" / "smoke").rglob("*.json") if started.get(p) != p.stat().st_mtime_ns
    ]
    assert written, f"{script} --smoke wrote no JSON result under benchmarks/results/smoke/"
