"""Programmatic critics: turn one feedback row into a ``ParsedFeedback`` (critique + quoted spans) without a model.

- :class:`~t2g_core.critics.reference.ReferenceCritic` (summarization, QA): compares with the reference and the
  demo's ``meta.facts``; fast enough to be PPO's "oracle" reward source.
- :class:`~t2g_core.critics.code.CodeCritic` (code): runs the tests in a sandbox and localises the failure.

Both have ``critique(row)`` and ``critique_batch(rows)`` (the reward-source protocol).
"""

from t2g_core.critics.code import CodeCritic
from t2g_core.critics.reference import ReferenceCritic

__all__ = ["CodeCritic", "ReferenceCritic"]
