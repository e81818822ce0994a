"""Inbox bookkeeping writes through unique temporary names: a writer never trips over another's temporary file
(before: fixed ``<name>.tmp`` names, so a second writer's temp file in place broke the first)."""

from __future__ import annotations

import hashlib


def test_ledger_and_landed_copies_survive_another_writers_temp_files(tmp_path, run_task):
    from t2g_core.config import WorkspaceConfig
    from t2g_core.inbox import LANDED_DIR, SEEN_FILE
    from tasks.inbox import scan_inbox

    ws = WorkspaceConfig(root=str(tmp_path / "ws"))
    inbox, state = tmp_path / "ws" / "inbox", tmp_path / "ws" / "artifacts" / "inbox"
    inbox.mkdir(parents=True)
    (state / LANDED_DIR).mkdir(parents=True)
    data = b'{"id": "a", "task": "qa", "prompt": "p", "response": "r"}\n'
    (inbox / "new.jsonl").write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    (state / LANDED_DIR / f".{sha[:32]}.jsonl.tmp").mkdir()  # another writer's temp files, in the old fixed names
    (state / f"{SEEN_FILE}.tmp").mkdir()
    found = run_task(scan_inbox, str(inbox), ws)
    assert [f["sha256"] for f in found] == [sha]
    assert (state / LANDED_DIR / f"{sha[:32]}.jsonl").read_bytes() == data
    assert sha in (state / SEEN_FILE).read_text()


LINE = b'{"id": "a", "task": "qa", "prompt": "p", "response": "r"}\n'


def _scan(tmp_path, run_task, **workspace):
    from t2g_core.config import WorkspaceConfig
    from tasks.inbox import scan_inbox

    ws = WorkspaceConfig(root=str(tmp_path / "ws"), **workspace)
    inbox = tmp_path / "ws" / "inbox"
    return inbox, (lambda: run_task(scan_inbox, str(inbox), ws))


def test_only_regular_files_are_taken_and_a_copy_keeps_the_source_private(tmp_path, run_task):
    """A symlink to a private file, a symlink to /dev/zero and a FIFO (which blocks whoever opens it) are left alone;
    a private 0600 file lands as a 0600 copy (before: followed, read forever, and copied world-readable)."""
    import os
    import stat

    from t2g_core.inbox import LANDED_DIR

    inbox, scan = _scan(tmp_path, run_task)
    inbox.mkdir(parents=True)
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(LINE.replace(b'"a"', b'"secret"'))
    secret.chmod(0o600)
    (inbox / "leak.jsonl").symlink_to(secret)
    (inbox / "zero.jsonl").symlink_to("/dev/zero")
    os.mkfifo(inbox / "pipe.jsonl")
    (inbox / "linked").symlink_to(tmp_path, target_is_directory=True)  # a symlinked folder is not walked
    mine = inbox / "mine.jsonl"
    mine.write_bytes(LINE)
    mine.chmod(0o600)
    found = scan()
    assert [f["source"] for f in found] == [str(mine)]
    landed = list((tmp_path / "ws" / "artifacts" / "inbox" / LANDED_DIR).iterdir())
    assert len(landed) == 1 and landed[0].read_bytes() == LINE
    assert stat.S_IMODE(landed[0].stat().st_mode) == 0o600
    assert scan() == []  # seen: not announced twice, and the refused names are still refused


def test_a_file_over_the_cap_is_left_and_files_are_hashed_in_chunks(tmp_path, run_task, monkeypatch):
    import hashlib

    import t2g_core.inbox as inbox_lib

    inbox, scan = _scan(tmp_path, run_task, inbox_max_mb=1)
    inbox.mkdir(parents=True)
    big = inbox / "big.jsonl"
    with open(big, "wb") as f:
        f.truncate((2 << 20) + 1)  # one byte over a 2 MiB cap (sparse)
    ok = inbox / "ok.jsonl"
    ok.write_bytes(LINE * 30_000)  # about 1.7 MB: more than one read chunk
    assert scan() == []  # 1 MiB cap: both are too large, and both stay in the inbox
    reads: list[int] = []
    real_read = inbox_lib.os.read
    monkeypatch.setattr(inbox_lib.os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    found = _scan(tmp_path, run_task, inbox_max_mb=2)[1]()
    assert [f["source"] for f in found] == [str(ok)]
    assert found[0]["sha256"] == hashlib.sha256(ok.read_bytes()).hexdigest()
    assert reads and max(reads) <= inbox_lib.CHUNK  # streamed, never the whole file at once
    assert big.exists() and ok.exists()


def test_the_serve_process_watch_skips_what_it_refuses_and_takes_the_rest(tmp_path):
    """The inbox watch scans outside any flow or task run (a thread of the serve process): a symlink or a FIFO is
    refused with a log line there too, and the regular file beside it is still taken (before: the refusal's log call
    failed without a run, so one symlink stopped every later scan)."""
    import os

    from t2g_core.config import WorkspaceConfig
    from tasks.inbox import scan_inbox

    ws = WorkspaceConfig(root=str(tmp_path / "ws"))
    inbox = tmp_path / "ws" / "inbox"
    inbox.mkdir(parents=True)
    (inbox / "zero.jsonl").symlink_to("/dev/zero")
    os.mkfifo(inbox / "pipe.jsonl")
    (inbox / "mine.jsonl").write_bytes(LINE)
    found = scan_inbox.fn(str(inbox), ws)  # what flows.feedback.announce calls from the watch thread
    assert [f["source"] for f in found] == [str(inbox / "mine.jsonl")]
