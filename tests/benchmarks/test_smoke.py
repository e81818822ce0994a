"""Every benchmark runs at its ``--smoke`` size, so none can rot unseen (a crash fails the suite, not a README).

Smoke runs write under pytest's temporary folder (``$T2G_BENCH_RESULTS``, read by ``benchmarks/testbed``), never
into the source tree; one folder serves the whole module, so the benchmarks that share smoke models build them once.
Each run is a fresh process, as ``python benchmarks/<script> --smoke`` is, forked from a server that imported torch,
transformers and peft once (about 4 s of CPU a run otherwise).
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import runpy
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name.startswith(("bench_", "gpu_smoke")))
NOT_WRITTEN_BY_A_RUN = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}  # read by the libraries at import
PRELOADED = ["torch", "transformers", "peft", "pandas", "pyarrow.parquet"]  # none reads the benchmarks' settings


def test_every_benchmark_is_covered():
    assert {
        "bench_align.py",
        "bench_ppo_step.py",
        "bench_ppo_sample_efficiency.py",
        "bench_vs_trl.py",
        "bench_kl_stop.py",
        "bench_self_distillation.py",
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


def _as_main(script: str, argv: list[str], env: dict[str, str], out: str) -> None:
    """In the forked process: what ``python <script> <argv>`` does (its folder first on the path, run as
    ``__main__``), its output into ``out``.stdout / ``out``.stderr, its exit status as the process's."""
    for stream, name in ((1, "stdout"), (2, "stderr")):
        os.dup2(os.open(f"{out}.{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), stream)
    os.environ.update(env)
    os.chdir(ROOT)
    sys.argv = [script, *argv]
    sys.path.insert(0, str(Path(script).parent))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported as the interpreter would, then the exit status says it
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@pytest.fixture(scope="module")
def run_script(tmp_path_factory):
    """``run_script(script, *argv, env=..., timeout=...)``: a CompletedProcess of the script run in a fresh process."""
    outputs = tmp_path_factory.mktemp("bench-output")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED)
    with pytest.MonkeyPatch.context() as patch:  # the server starts (and imports) with the benchmarks' switches
        for key, value in OFFLINE.items():
            patch.setenv(key, value)
        context.Process(target=os._exit, args=(0,)).start()

    def run(script: Path, *argv: str, env: dict[str, str] | None = None, timeout: float = 600):
        out = str(outputs / f"{script.stem}-{len(list(outputs.iterdir()))}")
        process = context.Process(target=_as_main, args=(str(script), list(argv), {**OFFLINE, **(env or {})}, out))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired([str(script), *argv], timeout)
        text = {name: Path(f"{out}.{name}").read_text(errors="replace") for name in ("stdout", "stderr")}
        return subprocess.CompletedProcess([str(script), *argv], process.exitcode, text["stdout"], text["stderr"])

    return run


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_at_smoke_size(script, results, run_script):
    repo_before = _tree()
    started = {p: p.stat().st_mtime_ns for p in (results / "smoke").rglob("*.json")}
    proc = run_script(ROOT / "benchmarks" / script, "--smoke", env={"T2G_BENCH_RESULTS": str(results)})
    assert proc.returncode == 0, f"{script} --smoke failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    repo_after = _tree()
    changed = sorted(os.path.relpath(p, ROOT) for p, t in repo_after.items() if repo_before.get(p) != t)
    assert changed == [], f"{script} --smoke wrote into the source tree: {changed[:20]}"
    written = [p for p in (results / "smoke").rglob("*.json") if started.get(p) != p.stat().st_mtime_ns]
    assert written, f"{script} --smoke wrote no JSON result under $T2G_BENCH_RESULTS/smoke/"


RM_PPO = ROOT / "benchmarks" / "bench_rm_ppo.py"


def test_rm_ppo_refreshed_arm_stops_with_a_reason_without_its_loop_settings():
    """The refreshed-tagger arm is never the static tagger again: without ``--refresh-set ppo.critique_loop...`` it
    says so and stops, and loop settings PPO refuses (a budget over the batch) stop it before any work."""

    def rm_ppo(*flags: str) -> subprocess.CompletedProcess:  # a plain interpreter: it stops before any heavy import
        cmd, env = [sys.executable, str(RM_PPO), *flags], {**os.environ, **OFFLINE}
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    proc = rm_ppo("--arms", "oracle,refreshed")
    assert proc.returncode != 0 and "arm refreshed:" in proc.stderr, proc.stderr[-2000:]
    assert "--refresh-set" in proc.stderr
    proc = rm_ppo("--smoke", "--arms", "refreshed", "--refresh-set", "ppo.critique_loop.budget=5")
    assert proc.returncode != 0 and "arm refreshed:" in proc.stderr and "budget 5" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
def test_rm_ppo_refreshed_arm_and_its_controls_at_smoke_size(results, run_script):
    """At smoke size the refreshed arm runs the critique loop after each step: a round per step in its history, and
    the drift step after the first refresh is scored by the refreshed tagger, not the static one. Its controls run
    beside it: the label-matched tagger, trained once per seed on the loop's number of labels (budget 4 x 2 rounds)
    of warm-start samples, scores that arm and its drift curve; the loop with the noisy annotator writes labels
    without omissions; the loop refreshing the matched tagger starts from it; the summary holds their differences,
    paired by seed. The ensemble arm's static tagger has 5 span heads, trained for it alone."""
    import json

    import pandas as pd

    loop = ["ppo.critique_loop.every=1", "ppo.critique_loop.budget=4", "ppo.critique_loop.refresh_steps=2"]
    arms = ["--arms", "refreshed,matched,refreshed_noisy,refreshed_matched,ensemble", "--estimators", "gae"]
    flags = ["--smoke", *arms, *(x for s in loop for x in ("--refresh-set", s))]
    proc = run_script(RM_PPO, *flags, env={"T2G_BENCH_RESULTS": str(results)})
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    work = results / "smoke" / "bench_rm_ppo_work"
    runs = {r["arm"]: r for r in (json.loads(p.read_text()) for p in (work / "runs").rglob("run.json"))}
    run = runs["refreshed-gae"]
    assert [h["critique_loop/round"] for h in run["history"]] == [0.0, 1.0]
    assert all(h["critique_loop/annotated"] == 4.0 for h in run["history"])
    assert list(run["reward_model_at"]) == ["2"] and "round-001" in run["reward_model_at"]["2"]
    summary = json.loads((results / "smoke" / "bench_rm_ppo.summary.json").read_text())
    assert summary["settings"]["matched_labels"] == 8
    (matched,) = {runs["matched-gae"]["reward_model_at"][k] for k in ("0", "2")}
    assert "rm-matched-" in matched
    noisy = pd.read_parquet(
        next((work / "runs").glob("*/refreshed_noisy-gae-seed0/critique_loop/round-000")) / "annotations.parquet"
    )
    assert all(len(m) == 0 for m in noisy["missing"])
    control = summary["controls"]["refreshed-gae - matched-gae"]
    assert control["seeds"] == 1 and len(control["final_error"]["per_seed"]) == 1
    assert "refreshed_noisy-gae - refreshed-gae" in summary["controls"]
    both = runs["refreshed_matched-gae"]  # the loop refreshes the label-matched tagger, which scores until then
    assert both["loop_start"] == both["reward_model_at"]["0"] == matched and "round-001" in both["reward_model_at"]["2"]
    assert run["loop_start"] != matched  # the refreshed arm's loop starts from the static tagger
    assert "refreshed_matched-gae - matched-gae" in summary["controls"]
    assert "ensemble-gae" in runs  # scored by a tagger of its own, with 5 span heads
    assert json.loads((work / "rm-tagger-heads5" / "tagger" / "tagger.json").read_text())["heads"] == 5
