"""The answer cache: a SQLite file that keeps every committed answer across instances, processes and upgrades."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from t2g_core.annotators.cache import DB_NAME, AnswerCache, cache_key

ANSWER = {"content": '{"critique": "fine"}', "finish_reason": "stop", "prompt_tokens": 12, "completion_tokens": 5}


def test_answers_survive_a_new_instance_and_the_key_covers_every_input(tmp_path):
    msgs = [{"role": "user", "content": "hi"}]
    key = cache_key("m", "v1", msgs, {"temperature": 0.2})
    assert (
        len(
            {
                key,
                cache_key("m2", "v1", msgs, {"temperature": 0.2}),
                cache_key("m", "v2", msgs, {"temperature": 0.2}),
                cache_key("m", "v1", [{"role": "user", "content": "hi!"}], {"temperature": 0.2}),
                cache_key("m", "v1", msgs, {"temperature": 0.3}),
            }
        )
        == 5
    )
    with AnswerCache(tmp_path) as cache:
        assert cache.get(key) is None
        cache.put(key, ANSWER)
    with AnswerCache(tmp_path) as cache:
        assert cache.get(key) == ANSWER and len(cache) == 1
    assert (tmp_path / DB_NAME).exists()


@pytest.mark.slow  # a fresh interpreter writes the answers
def test_another_process_sees_each_answer_once_it_is_put(tmp_path):
    writer = (
        "import sys; from t2g_core.annotators.cache import AnswerCache; "
        "AnswerCache(sys.argv[1]).put('k2', {'content': 'x'})"
    )
    with AnswerCache(tmp_path) as cache:
        cache.put("k1", ANSWER)
        subprocess.run([sys.executable, "-c", writer, str(tmp_path)], check=True)  # exits without closing anything
        assert cache.get("k2") == {"content": "x"} and len(cache) == 2


def test_answer_files_of_the_earlier_layout_are_imported_once(tmp_path):
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "abc.json").write_text(json.dumps(ANSWER), encoding="utf-8")
    (tmp_path / "ab" / "abd.json").write_text('{"content": "cut', encoding="utf-8")  # torn: stays a miss
    (tmp_path / "ab" / ".tmp-1.partial").write_text("{}", encoding="utf-8")
    with AnswerCache(tmp_path) as cache:
        assert cache.get("abc") == ANSWER and cache.get("abd") is None and len(cache) == 1
