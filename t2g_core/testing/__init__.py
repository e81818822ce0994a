"""Test helpers that other engineers' tests and benchmarks may reuse (no pytest dependency)."""

from t2g_core.testing.openai_server import PROSE, FakeOpenAIServer, Reply, quoting_answer

__all__ = ["PROSE", "FakeOpenAIServer", "Reply", "quoting_answer"]
