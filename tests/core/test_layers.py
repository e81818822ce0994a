"""One entry point per stage: only ``t2g_core.stages`` loads a stage's inputs and calls the library for its work.

The Prefect tasks (``tasks/``) and the CLI commands (``t2g_cli/``) wrap those functions. Before, both layers called
the library themselves and had drifted apart (the CLI's reward-model data builder got the align settings, the task's
did not); a wrapper that imports one of the stage-work functions below is that drift starting again.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGE_WORK = {
    "t2g_core.spans": {"align_frame"},
    "t2g_core.annotators": {"annotate", "annotate_frame"},
    "t2g_core.reward_model.data": {"build_rm_data"},
    "t2g_core.reward_model.train": {"train_rm"},
    "t2g_core.reward_model.evaluate": {"evaluate_model", "write_eval_report"},
    "t2g_core.reward_model.tagger_train": {"fit_tagger"},
    "t2g_core.ppo.run": {"prepare_run", "run_from_dir"},
    "t2g_core.ppo": {"train"},
    "t2g_core.evaluation": {"evaluate_policies"},
    "t2g_core.evaluation.results": {"evaluate_policies"},
    "t2g_core.models.tiny": {"ensure_demo_models"},
    "t2g_core.validation": {"check_batch", "review_sample", "make_batch", "write_report", "with_review"},
    "t2g_core.demo": {"make_demo_feedback"},
    "t2g_core.ingest": {"ingest"},
}


def _imports(path: Path) -> list[tuple[str, str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.module or "", alias.name, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]


def test_wrappers_call_stage_functions_not_the_library():
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}.{name}"
        for folder in ("tasks", "t2g_cli", "flows")
        for path in sorted((ROOT / folder).glob("*.py"))
        for module, name, line in _imports(path)
        if name in STAGE_WORK.get(module, ())
    ]
    assert offenders == [], "call the t2g_core.stages function instead:\n" + "\n".join(offenders)


def test_code_style_is_enforced():
    """ruff (line length 120, complexity limit) and its formatter, as `make lint` runs them."""
    ruff = Path(sys.executable).parent / "ruff"
    for args in (["check", "."], ["format", "--check", "."]):
        out = subprocess.run([str(ruff), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]
