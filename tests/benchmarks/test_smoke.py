"""Every benchmark runs at its ``--smoke`` size, so none can rot unseen (a crash fails the suite, not a README).

Smoke runs write under pytest's temporary folder (``$T2G_BENCH_RESULTS``, read by ``benchmarks/testbed``), never
into the source tree; one folder serves the whole module, so the benchmarks that share smoke models build them once.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name.startswith(("bench_", "gpu_smoke")))
NOT_WRITTEN_BY_A_RUN = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}


def test_every_benchmark_is_covered():
    assert {
        "bench_align.py",
        "bench_ppo_step.py",
        "bench_ppo_sample_efficiency.py",
        "bench_vs_trl.py",
        "bench_kl_stop.py",
    } <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmarks_share_code_and_results_folder_through_testbed(script):
    """One way to share: ``from testbed import ...``; no benchmark imports another, none builds its results path."""
    source = (ROOT / "benchmarks" / script).read_text(encoding="utf-8")
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    ]
    assert not [m for m in imported if m and m.startswith(("bench_", "benchmarks", "gpu_smoke"))], imported
    assert '"results"' not in source, f"{script}: take the results folder from testbed.results_dir"


def _tree() -> dict[str, int]:
    """Every file in the repository with its mtime, without VCS data, virtual environments and tool caches."""
    files = {}
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in NOT_WRITTEN_BY_A_RUN]
        for name in names:
            path = os.path.join(folder, name)
            files[path] = os.stat(path).st_mtime_ns
    return files


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bench-results")


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_at_smoke_size(script, results):
    repo_before = _tree()
    started = {p: p.stat().st_mtime_ns for p in (results / "smoke").rglob("*.json")}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "T2G_BENCH_RESULTS": str(results)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{script} --smoke failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    repo_after = _tree()
    changed = sorted(os.path.relpath(p, ROOT) for p, t in repo_after.items() if repo_before.get(p) != t)
    assert changed == [], f"{script} --smoke wrote into the source tree: {changed[:20]}"
    written = [p for p in (results / "smoke").rglob("*.json") if started.get(p) != p.stat().st_mtime_ns]
    assert written, f"{script} --smoke wrote no JSON result under $T2G_BENCH_RESULTS/smoke/"


def test_rm_ppo_refreshed_arm_stops_with_a_reason_until_the_critique_loop_exists():
    """The refreshed-tagger arm is named but not faked: without PPO's critique-loop setting it says so and stops."""
    from t2g_core.config.ppo import PPOConfig

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_rm_ppo.py"), "--arms", "oracle,refreshed"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "arm refreshed:" in proc.stderr, proc.stderr[-2000:]
    if "critique_loop" not in PPOConfig.model_fields:
        assert "not available" in proc.stderr and "ppo.critique_loop" in proc.stderr
    else:  # the loop exists: the arm needs its settings, or it would be the static tagger again
        assert "--refresh-set" in proc.stderr
