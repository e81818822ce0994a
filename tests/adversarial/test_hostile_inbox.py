"""Names planted in the drop folder by someone who may write into it (the inbox is written by others).

Before: the inbox kept its ledgers, their locks and its landed copies inside the drop folder, opened by name:
``inbox/..seen.json.lock`` as a symlink had its target truncated and overwritten by the next scan, ``.seen.json`` as a
symlink to a private JSON had its keys merged into the ledger, ``.seen.json`` as a FIFO blocked the scan forever, and
``.landed`` as a symlink had whatever folder it named listed as pending feedback. Now they live in the workspace's
``artifacts/inbox/``; an earlier workspace's are taken over once, reading only this user's own regular files.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from t2g_core.config import WorkspaceConfig
from t2g_core.inbox import pending_files, scan

LINE = b'{"id": "a", "task": "qa", "prompt": "p", "response": "r"}\n'
SECRET = "private-token-5f3a"


def _workspace(tmp_path):
    inbox = tmp_path / "ws" / "inbox"
    inbox.mkdir(parents=True)
    (inbox / "mine.jsonl").write_bytes(LINE)
    return WorkspaceConfig(root=str(tmp_path / "ws")), inbox


def _files_holding(root, text: str) -> list[Path]:
    files = [p for p in Path(root).rglob("*") if p.is_file() and not p.is_symlink()]  # a FIFO is not a file
    return [p for p in files if text.encode() in p.read_bytes()]


def test_a_symlinked_ledger_lock_leaves_its_target_untouched(tmp_path):
    ws, inbox = _workspace(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (inbox / "..seen.json.lock").symlink_to(victim)
    found = scan(str(inbox), ws, lambda _m: None)
    assert [f["source"] for f in found] == [str(inbox / "mine.jsonl")]
    assert victim.read_text() == "keep me"


def test_a_symlinked_or_foreign_ledger_is_not_merged(tmp_path):
    """The earlier place's ``.seen.json`` as a symlink to a private JSON: never read, so its keys reach no file."""
    ws, inbox = _workspace(tmp_path)
    private = tmp_path / "private.json"
    private.write_text(json.dumps({SECRET: "x"}))
    private.chmod(0o600)
    (inbox / ".seen.json").symlink_to(private)
    heard: list[str] = []
    assert len(scan(str(inbox), ws, heard.append)) == 1
    assert _files_holding(tmp_path / "ws", SECRET) == []
    assert any(".seen.json: a symbolic link" in m for m in heard)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a file of another user needs root")
def test_a_ledger_another_user_planted_is_not_taken_over(tmp_path):
    """A regular ``.seen.json`` of another user claiming a file was seen would have it never taken."""
    import hashlib

    ws, inbox = _workspace(tmp_path)
    planted = inbox / ".seen.json"
    planted.write_text(json.dumps({hashlib.sha256(LINE).hexdigest(): "claimed"}))
    os.chown(planted, 12345, 12345)
    heard: list[str] = []
    assert [f["source"] for f in scan(str(inbox), ws, heard.append)] == [str(inbox / "mine.jsonl")]
    assert any("not this user's own file" in m for m in heard)


def test_a_fifo_ledger_does_not_block_the_scan(tmp_path):
    ws, inbox = _workspace(tmp_path)
    fifo = inbox / ".seen.json"
    os.mkfifo(fifo)
    heard: list[str] = []
    done: list = []
    scanner = threading.Thread(target=lambda: done.append(scan(str(inbox), ws, heard.append)), daemon=True)
    scanner.start()
    scanner.join(timeout=30)
    try:
        assert not scanner.is_alive(), "the scan blocked on a FIFO"
        assert len(done[0]) == 1 and any("a FIFO" in m for m in heard)
    finally:
        if scanner.is_alive():  # unblock the stuck reader (today's code) so the test process can end
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_symlinked_landing_folder_is_not_listed(tmp_path):
    ws, inbox = _workspace(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.jsonl").write_text(json.dumps({"id": SECRET, "task": "qa", "prompt": "p", "response": "r"}))
    (inbox / ".landed").symlink_to(elsewhere, target_is_directory=True)
    heard: list[str] = []
    assert pending_files(ws, heard.append) == []
    assert _files_holding(tmp_path / "ws", SECRET) == []
    assert any(".landed" in m for m in heard)


def test_the_drop_folder_is_sticky(tmp_path):
    """Anyone allowed to drop files may not delete or replace another's (the sticky bit, as on /tmp)."""
    ws, inbox = _workspace(tmp_path)
    inbox.chmod(0o733)  # opened to others by its owner, the sticky bit forgotten
    scan(str(inbox), ws, lambda _m: None)
    assert inbox.stat().st_mode & stat.S_ISVTX


def test_a_dropped_file_this_user_may_not_read_is_skipped_and_the_others_are_taken(tmp_path, monkeypatch):
    """Another user's file dropped with mode 0600 (simulated: the tests may run as root, who reads anything) is logged
    and left for a later scan (before: its PermissionError failed every scan, so nothing else was taken)."""
    ws, inbox = _workspace(tmp_path)
    (inbox / "theirs.jsonl").write_bytes(LINE.replace(b'"a"', b'"b"'))
    real_open = os.open

    def denied(path, flags, *args, **kwargs):
        if str(path).endswith("theirs.jsonl"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    heard: list[str] = []
    assert [f["source"] for f in scan(str(inbox), ws, heard.append)] == [str(inbox / "mine.jsonl")]
    assert len(heard) == 1 and "Permission denied" in heard[0] and "theirs.jsonl" in heard[0]
