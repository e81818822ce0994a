"""One writer per workspace folder, with two real processes: a stage folder another run holds is refused with a
message naming that run (and taken over once its process is dead); the dataset version pointers are one file that
two writers never corrupt; checkpoint writes of two processes into one folder never collide; two commands starting
at once in one workspace do not race the Prefect database migration; temporaries of killed writers are collected."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from t2g_env.kept_databases import keep, kept_copy, place

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, *args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


HOLD = """
    import sys, time
    from t2g_core.locks import folder_lock
    with folder_lock(sys.argv[1], "run-A"):
        print("held", flush=True)
        time.sleep(600)
"""


def test_a_stage_folder_held_by_a_live_run_is_refused_naming_it_then_taken_over_when_it_dies(tmp_path):
    from t2g_core.config import PPOConfig
    from t2g_core.config.stages import PPOSettings
    from t2g_core.locks import Busy
    from t2g_core.stages import ppo
    from t2g_core.stages.context import StageContext
    from t2g_core.stages.refs import ArtifactRef, ModelsRef

    ctx = StageContext.keyed(tmp_path, "ppo-samekey", run_id="run-B")
    run_dir = ctx.out.folder("checkpoints/ppo")
    holder = _python(HOLD, str(run_dir))
    try:
        assert holder.stdout.readline().strip() == "held"
        settings = PPOSettings(ppo=PPOConfig(reward_source="oracle"))
        feedback = ArtifactRef(path=str(tmp_path / "fb.parquet"), sha256="0", n_rows=1, schema="feedback", key="k")
        models = ModelsRef(base="b", policy="p", base_digest="id:b", policy_digest="id:p")
        with pytest.raises(Busy) as info:
            ppo.train(feedback, models, None, settings, ctx)  # refused before it reads or writes anything
        message = str(info.value)
        assert message.startswith(f"busy: run run-A (pid {holder.pid} on host ") and str(run_dir) in message
        assert not run_dir.exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with ctx.own_folder("checkpoints/ppo") as folder:  # the dead holder's lock is taken over at once
        record = json.loads((folder.parent / f".{folder.name}.lock").read_text())
        assert record["owner"] == "run-B" and record["pid"] == os.getpid()


ADVANCE = """
    import sys, uuid
    from t2g_core.config import WorkspaceConfig
    from t2g_core.store import ArtifactRef
    from t2g_core.datasets import advance_versions

    ws = WorkspaceConfig(root=sys.argv[1])
    for i in range(int(sys.argv[2])):
        sha = uuid.uuid4().hex
        fb = ArtifactRef(path=f"/fb/{sha}", sha256=sha, n_rows=i, schema="feedback", key=sha[:8])
        ann = ArtifactRef(path=f"/ann/{sha}", sha256="a" + sha, n_rows=i, schema="annotations", key=sha[:8])
        print(advance_versions(ws, fb, ann), sha, flush=True)
"""


def test_two_writers_of_the_dataset_versions_never_reuse_a_number_nor_disagree(tmp_path):
    from t2g_core.config import WorkspaceConfig
    from t2g_core.datasets import latest_annotations, latest_feedback, version_of

    procs = [_python(ADVANCE, str(tmp_path), "40") for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    versions = [int(line.split()[0]) for out, _ in outputs for line in out.splitlines()]
    assert sorted(versions) == list(range(1, 81))  # 80 distinct versions: no number was handed out twice
    ws = WorkspaceConfig(root=str(tmp_path))
    assert version_of(ws) == 80
    assert latest_annotations(ws).sha256 == "a" + latest_feedback(ws).sha256  # the two references agree


def test_a_run_whose_base_version_moved_is_not_recorded(tmp_path):
    from t2g_core.config import WorkspaceConfig
    from t2g_core.datasets import DatasetsMoved, advance_versions, latest_feedback
    from t2g_core.store import ArtifactRef

    ws = WorkspaceConfig(root=str(tmp_path))

    def ref(sha: str) -> ArtifactRef:
        return ArtifactRef(path=f"/{sha}", sha256=sha, n_rows=1, schema="feedback", key=sha)

    assert advance_versions(ws, ref("v1"), ref("a1"), based_on=None) == 1
    assert advance_versions(ws, ref("v2"), ref("a2"), based_on=ref("v1")) == 2
    with pytest.raises(DatasetsMoved, match="moved to version 2"):
        advance_versions(ws, ref("v2b"), ref("a2b"), based_on=ref("v1"))  # another run moved v1 -> v2 meanwhile
    assert latest_feedback(ws).sha256 == "v2"


CHECKPOINTS = """
    import sys
    import torch
    from t2g_core.reward_model.tagger_train import _save_checkpoint

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    for step in range(int(sys.argv[2])):
        _save_checkpoint(__import__("pathlib").Path(sys.argv[1]), model, optimizer, scheduler, step)
    print("done", flush=True)
"""


@pytest.mark.slow  # two Python processes that load torch
def test_two_processes_checkpointing_into_one_folder_never_collide(tmp_path):
    from t2g_core.training import load_state

    final = tmp_path / "checkpoints" / "step-5"
    procs = [_python(CHECKPOINTS, str(final), "25") for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    assert set(load_state(final / "state.pt")) == {"step", "params", "optimizer", "scheduler", "rng"}
    assert [p.name for p in final.parent.iterdir()] == ["step-5"]  # no staging folder left behind


START = """
    import os, sys
    os.environ["PREFECT_HOME"] = sys.argv[1]
    from t2g_cli.runtime import prefect_started, start_temporary_prefect
    url = start_temporary_prefect(240)
    prefect_started()
    print(url, flush=True)
"""


@pytest.mark.slow
def test_two_commands_starting_at_once_do_not_race_the_prefect_database_migration(tmp_path, monkeypatch):
    """Both migrate a new database (no kept copy yet: a cache of their own); the one that migrated keeps a copy, and
    the next new workspace starts from it: what it holds shows up there."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env_home = tmp_path / "prefect"
    procs = [_python(START, str(env_home)) for _ in range(2)]
    outputs = [p.communicate(timeout=400) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-3000:] for _, err in outputs]
    assert all(out.strip().startswith("http://127.0.0.1:") for out, _ in outputs)

    [kept] = (tmp_path / "cache" / "text2grad").iterdir()  # one copy, no partial left
    with contextlib.closing(sqlite3.connect(kept)) as db:
        assert db.execute("SELECT count(*) FROM configuration").fetchone() == (0,)  # no telemetry session id
        assert db.execute("SELECT count(*) FROM block_type").fetchone()[0] > 0  # migrated, block types registered
        db.execute("""INSERT INTO variable (name, value) VALUES ('marker', '"from the kept copy"')""")
        db.commit()
    start = _python(START, str(tmp_path / "other-workspace"))
    out, err = start.communicate(timeout=400)
    assert start.returncode == 0, err[-3000:]
    with contextlib.closing(sqlite3.connect(tmp_path / "other-workspace" / "prefect.db")) as db:
        assert db.execute("SELECT value FROM variable WHERE name = 'marker'").fetchone() == ('"from the kept copy"',)


def _prefect_like(path: Path, *tables: str, runs: int = 0) -> Path:
    with contextlib.closing(sqlite3.connect(path)) as db:
        for table in tables:
            db.execute(f"CREATE TABLE {table} (name TEXT)")
        db.executemany("INSERT INTO flow_run VALUES (?)", [(f"run-{i}",) for i in range(runs)])
        db.commit()
    return path


def test_a_copy_that_cannot_be_kept_costs_nothing_but_the_copy(tmp_path, monkeypatch):
    database = _prefect_like(tmp_path / "prefect.db", "configuration", "flow_run")
    (tmp_path / "cache").write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    keep(database, "prefect")  # no error: the run goes on
    no_table = _prefect_like(tmp_path / "other.db", "flow_run")  # without the table it empties: no partial left
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "kept"))
    keep(no_table, "prefect")
    assert list((tmp_path / "kept" / "text2grad").iterdir()) == []


def test_a_copy_that_holds_runs_is_neither_used_nor_kept(tmp_path, monkeypatch):
    """A database kept after runs were recorded (the test harness's kept at the end of its session did) would hand
    them to every new workspace, where a stale Running one looks like a run left behind: it is replaced."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    keep(_prefect_like(tmp_path / "used.db", "configuration", "flow_run", runs=1), "prefect")
    assert not kept_copy("prefect").exists()
    kept_copy("prefect").parent.mkdir(parents=True)
    _prefect_like(kept_copy("prefect"), "configuration", "flow_run", runs=2)  # such a copy, left by older code
    assert not place(tmp_path / "new.db", "prefect") and not (tmp_path / "new.db").exists()
    keep(_prefect_like(tmp_path / "fresh.db", "configuration", "flow_run"), "prefect")
    assert place(tmp_path / "new.db", "prefect")
    with contextlib.closing(sqlite3.connect(tmp_path / "new.db")) as db:
        assert db.execute("SELECT count(*) FROM flow_run").fetchone() == (0,)


def test_stale_temporaries_of_killed_writers_are_collected(tmp_path):
    from t2g_core.housekeeping import collect_stale_temporaries

    old, fresh = time.time() - 3 * 3600, time.time()
    stale = [
        tmp_path / "artifacts" / "feedback" / ".k1.tmp-12-abcdef",
        tmp_path / "checkpoints" / "ppo" / "r" / "checkpoints" / ".step-000004.tmp-99-0123456789ab",
        tmp_path / "reports" / ".summary.json.tmp-7-ab12cd",
    ]
    live = tmp_path / "artifacts" / "feedback" / ".k2.tmp-13-abcdef"
    kept = [tmp_path / "artifacts" / "feedback" / "k3" / "data.parquet", tmp_path / "artifacts" / "inbox" / "seen.json"]
    for path in [*stale, live, *kept]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir() if path.name.startswith(".k") or ".step-" in path.name else path.write_text("x")
    for path in stale:
        os.utime(path, (old, old))
    os.utime(live, (fresh, fresh))
    assert collect_stale_temporaries(tmp_path, older_than_hours=2) == sorted(stale)
    assert not any(p.exists() for p in stale) and live.exists() and all(p.exists() for p in kept)


def test_a_lock_file_replaced_by_a_link_or_a_fifo_is_refused_and_its_target_untouched(tmp_path):
    """Before: the lock was opened through a symlink (or a second hard link) and its target truncated and overwritten
    with the holder's record; a FIFO in its place was opened too."""
    from t2g_core.locks import folder_lock, lock_path

    victim = tmp_path / "victim.txt"
    for plant in (lambda p: p.symlink_to(victim), lambda p: os.link(victim, p), os.mkfifo):
        victim.write_text("keep me")
        target = tmp_path / f"folder-{len(list(tmp_path.iterdir()))}"
        plant(lock_path(target))
        with pytest.raises(ValueError, match="not a plain lock file"), folder_lock(target, "run-A"):
            pass
        assert victim.read_text() == "keep me"


def test_what_people_dropped_in_the_inbox_is_never_collected_as_a_temporary(tmp_path):
    """A file planted in the drop folder under a temporary's name belongs to whoever dropped it (before: a run's
    housekeeping deleted it)."""
    import os

    from t2g_core.housekeeping import collect_stale_temporaries

    dropped = tmp_path / "inbox" / ".someones.jsonl.tmp"
    ours = tmp_path / "artifacts" / ".feedback.parquet.tmp-1-a"
    for path in (dropped, ours):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        os.utime(path, (1, 1))
    assert collect_stale_temporaries(tmp_path, older_than_hours=2) == [ours]
    assert dropped.exists()
