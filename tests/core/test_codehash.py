"""Cache keys that see code: a stage's key hashes the code it runs (its module and every first-party module it
imports), computed, never bumped by hand. Edits to comments, docstrings or layout change nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from t2g_core import codehash

ROOT = Path(__file__).resolve().parents[2]
KEYS = """
import json, sys
from t2g_core.stages.registry import BY_NAME
from tasks.caching import task_key
from tasks import annotate, evaluate, ppo
assert annotate.__file__.startswith(sys.argv[1]), annotate.__file__  # the copy, not the installed package
fns = {"annotate": annotate.annotate_critic, "ppo": ppo.train_policy, "evaluate": evaluate.evaluate_policy}
print(json.dumps({name: task_key(fn, {"settings": BY_NAME[name].settings()}) for name, fn in fns.items()}))
"""


def _package(root: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "src"
    for package in codehash.FIRST_PARTY:
        shutil.copytree(root / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _keys(copy: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run(
        [sys.executable, "-c", KEYS, str(copy)], cwd=copy, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


@pytest.mark.slow  # three fresh interpreters importing prefect and torch
def test_changing_code_used_by_ppo_changes_ppo_and_evaluation_keys_only(tmp_path):
    copy = _package(ROOT, tmp_path)
    original = _keys(copy)
    gae = copy / "t2g_core" / "rl" / "gae.py"
    source = gae.read_text()
    _edit(gae, "    advantages = advantages * m\n", "    advantages = advantages * m * 1.0\n")  # a function body
    changed = _keys(copy)
    assert changed["ppo"] != original["ppo"] and changed["evaluate"] != original["evaluate"]
    assert changed["annotate"] == original["annotate"]  # annotation does not run GAE: it stays cached
    gae.write_text(source)
    _edit(
        gae,
        '    """Return (advantages, returns), both (B, T), zero where ``mask`` is false."""',
        '    """Return (advantages, returns): both (B, T), zero wherever ``mask`` is false."""',
    )
    _edit(gae, "    T = rewards.shape[1]\n", "    T = rewards.shape[1]  # response length\n\n")
    assert _keys(copy) == original  # a docstring, a comment and a blank line re-run nothing


def test_digest_ignores_docstrings_comments_and_layout(tmp_path, monkeypatch):
    pkg = tmp_path / "t2g_core"
    shutil.copytree(ROOT / "t2g_core", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(tmp_path))
    codehash.clear_cache()
    try:
        before = codehash.code_digest("t2g_core.spans")
        _edit(pkg / "spans" / "__init__.py", '"""', '"""Edited docstring. ')
        codehash.clear_cache()
        assert codehash.code_digest("t2g_core.spans") == before
        _edit(pkg / "config" / "align.py", "85.0", "86.0")  # a default the spans package reads through its imports
        codehash.clear_cache()
        assert codehash.code_digest("t2g_core.spans") != before
        prompts = codehash.code_digest("t2g_core.annotators")
        prompt = pkg / "annotators" / "prompts" / "summarization.v1.txt"
        prompt.write_text(prompt.read_text() + "\nBe brief.")  # code reads its prompt templates: they count
        codehash.clear_cache()
        assert codehash.code_digest("t2g_core.annotators") != prompts
    finally:
        codehash.clear_cache()


def test_closure_follows_lazy_imports_and_package_data():
    closure = codehash.module_closure("tasks.annotate")
    assert "t2g_core.stages.annotate" in closure and "t2g_core.annotators.llm" in closure  # imported inside functions
    assert not any(m.startswith(("t2g_core.ppo", "t2g_core.rl")) for m in closure)


def test_unknown_module_is_an_error():
    with pytest.raises(ModuleNotFoundError):
        codehash.code_digest("t2g_core.no_such_module")
