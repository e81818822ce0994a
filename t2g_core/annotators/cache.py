"""Content-addressed answer cache: one small JSON file per request key, written atomically as each answer arrives.

The key hashes (model, prompt version, rendered messages, sampling parameters), so a re-run on the same data makes
no request for an item already answered, new items cost only their own requests, and a killed run loses no
completed answer (each file is complete or absent: temp file + ``os.replace``). Only answers that came back from
the endpoint are stored (including refusals and unparseable text, which cost money); transport failures are not.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_key(model: str, prompt_version: str, messages: list[dict[str, str]], sampling: dict[str, Any]) -> str:
    payload = {"model": model, "prompt_version": prompt_version, "messages": messages, "sampling": sampling}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class AnswerCache:
    """``<root>/<key[:2]>/<key>.json`` files. Safe for concurrent writers (atomic rename, same content per key)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):  # a corrupt entry is a miss, and will be overwritten
            return None

    def put(self, key: str, answer: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".partial")  # never matches *.json
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(answer, f, ensure_ascii=False)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.exists() else 0
