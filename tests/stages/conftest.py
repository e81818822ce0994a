"""Stage functions called directly: typed settings in, a :class:`StageContext` on ``tmp_path`` with a
:class:`MemoryTracker`, no Prefect and no MLflow (``tests/core/test_layers.py`` keeps these files free of both).

- ``key_of(stage, **params)``: the stage key the command line and the Prefect task compute (the stage's code, its
  settings by value, its inputs by content), so a test can say which change re-runs a stage and which does not.
- ``stage_ctx(stage, **params)``: a context keyed by ``key_of``, writing key-addressed outputs in ``tmp_path / "ws"``;
  its tracker is a fresh ``MemoryTracker`` (``ctx.tracker.outputs``, ``.metrics``...).
- ``demo_feedback(n, task="summarization")``: demo feedback written as an artifact of the workspace.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def key_of():
    from t2g_core.codehash import code_digest
    from t2g_core.stages.context import stage_key

    def _key(stage: str, **params) -> str:
        return stage_key(stage, code_digest(f"t2g_core.stages.{stage}"), params)

    return _key


@pytest.fixture
def stage_ctx(tmp_path, key_of):
    from t2g_core.stages.context import StageContext
    from t2g_core.tracking import MemoryTracker

    def _ctx(stage: str, **params):
        return StageContext.keyed(tmp_path / "ws", key_of(stage, **params), tracker=MemoryTracker())

    return _ctx


@pytest.fixture
def demo_feedback(tmp_path):
    from t2g_core.demo import make_demo_feedback
    from t2g_core.workspace import Workspace

    def _write(n: int, task: str = "summarization", seed: int = 0):
        df = make_demo_feedback(task, n, seed=seed)
        return Workspace.at(tmp_path / "ws").store.write("feedback", f"{task}-{n}-{seed}", df, "feedback")

    return _write
