"""Content-addressed answer cache: every answer is committed to a SQLite database the moment it arrives.

Only answers that came back are stored (refusals and unparseable text cost money too); transport failures are not.
Why SQLite (a commit costs about 20 us, a file per answer about 1 ms of kernel time) and sharing: docs/annotation.md.
Files of the earlier layout (``<root>/<key[:2]>/<key>.json``) are imported once, when the database is made.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

DB_NAME = "answers.sqlite3"


def cache_key(model: str, prompt_version: str, messages: list[dict[str, str]], sampling: dict[str, Any]) -> str:
    payload = {"model": model, "prompt_version": prompt_version, "messages": messages, "sampling": sampling}
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()  # valid text: plain UTF-8 bytes


class AnswerCache:
    """``get(key)`` / ``put(key, answer)`` over ``<root>/answers.sqlite3``; usable from any one thread at a time."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / DB_NAME
        new = not path.exists()
        self._lock = threading.Lock()
        # autocommit (isolation_level=None): each statement is its own transaction, committed when it returns
        self._db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")  # readers never block the writer; a commit is one append
        self._db.execute("PRAGMA synchronous=NORMAL")  # durable against a killed process; fsync at checkpoints
        self._db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, answer TEXT NOT NULL)")
        if new:
            self._import_answer_files()

    def _import_answer_files(self) -> None:
        rows = []
        for file in self.root.glob("??/*.json"):
            try:
                rows.append((file.stem, json.dumps(json.loads(file.read_text(encoding="utf-8")), ensure_ascii=False)))
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):  # a corrupt old entry is a miss
                continue
        if rows:
            with self._lock, self._db:  # one transaction
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR IGNORE INTO answers VALUES (?, ?)", rows)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        if not row:
            return None
        try:
            return json.loads(row[0])
        except ValueError:  # a corrupt entry is a miss: the item is asked again
            return None

    def put(self, key: str, answer: dict[str, Any]) -> None:
        """Store ``answer`` exactly; text that is not valid Unicode (a lone surrogate, which SQLite cannot hold as
        UTF-8) is stored as JSON ``\\u`` escapes, and read back the same."""
        text = json.dumps(answer, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(answer)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?)", (key, text))

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> AnswerCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
