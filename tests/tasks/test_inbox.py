"""Inbox bookkeeping writes through unique temporary names: a writer never trips over another's temporary file
(before: fixed ``<name>.tmp`` names, so a second writer's temp file in place broke the first)."""

from __future__ import annotations

import hashlib


def test_ledger_and_landed_copies_survive_another_writers_temp_files(tmp_path, run_task):
    from t2g_core.config import WorkspaceConfig
    from tasks.inbox import LANDED_DIR, SEEN_FILE, scan_inbox

    ws = WorkspaceConfig(root=str(tmp_path / "ws"))
    inbox = tmp_path / "ws" / "inbox"
    (inbox / LANDED_DIR).mkdir(parents=True)
    data = b'{"id": "a", "task": "qa", "prompt": "p", "response": "r"}\n'
    (inbox / "new.jsonl").write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    (inbox / LANDED_DIR / f".{sha[:32]}.jsonl.tmp").mkdir()  # another writer's temp files, in the old fixed names
    (inbox / f"{SEEN_FILE}.tmp").mkdir()
    found = run_task(scan_inbox, str(inbox), ws)
    assert [f["sha256"] for f in found] == [sha]
    assert (inbox / LANDED_DIR / f"{sha[:32]}.jsonl").read_bytes() == data
    assert sha in (inbox / SEEN_FILE).read_text()
