"""The benchmarks' shared devices: the noisy critic wrapper, the results a benchmark writes and publishes."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from t2g_core.spans import ParsedFeedback

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def testbed():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # what a benchmark script gets from its own folder
    try:
        yield importlib.import_module("testbed")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


class Fixed:
    """A reward source that answers every row with the same feedback."""

    def __init__(self, fb: ParsedFeedback):
        self.fb = fb

    def critique_batch(self, rows):
        return [self.fb for _ in rows]


FB = ParsedFeedback(
    "c",
    good_spans=["g1", "g2"],
    poor_spans=["p1"],
    missing=("city",),
    missing_at=(4,),
    located=((0, 2, "positive"), (3, 5, "negative")),
)


def _rows(n: int) -> list[dict]:
    return [{"id": f"r{i}", "response": f"text {i}"} for i in range(n)]


def test_noisy_critic_without_flips_keeps_the_spans_and_drops_the_omissions(testbed):
    (out,) = testbed.NoisyCritic(Fixed(FB), flip=0.0, seed=0).critique_batch(_rows(1))
    assert out.good_spans == ["g1", "g2"] and out.poor_spans == ["p1"] and out.located == FB.located
    assert out.missing == () and out.missing_at == ()
    assert out.critique == "c"


def test_noisy_critic_flips_every_label_at_one(testbed):
    (out,) = testbed.NoisyCritic(Fixed(FB), flip=1.0, seed=0).critique_batch(_rows(1))
    assert out.good_spans == ["p1"] and out.poor_spans == ["g1", "g2"]
    assert out.located == ((0, 2, "negative"), (3, 5, "positive"))


def test_noisy_critic_flips_about_the_share_asked_and_the_same_response_the_same_way(testbed):
    many = ParsedFeedback("c", good_spans=[f"g{i}" for i in range(10)], poor_spans=[f"p{i}" for i in range(10)])
    noisy = testbed.NoisyCritic(Fixed(many), flip=0.2, seed=3)
    outs = noisy.critique_batch(_rows(200))
    flipped = sum(
        sum(s.startswith("p") for s in o.good_spans) + sum(s.startswith("g") for s in o.poor_spans) for o in outs
    )
    assert 0.17 < flipped / 4000 < 0.23  # 4000 labels
    assert noisy.critique_batch(_rows(200)) == outs  # drawn from (seed, id, response): reproducible
    other = testbed.NoisyCritic(Fixed(many), flip=0.2, seed=4).critique_batch(_rows(200))
    assert other != outs


def test_noisy_critic_leaves_a_failed_critique_and_refuses_a_bad_share(testbed):
    failed = ParsedFeedback(None, status="parse_error", error="x", missing=("a",))
    assert testbed.NoisyCritic(Fixed(failed), flip=0.5, seed=0).critique_batch(_rows(1)) == [failed]
    with pytest.raises(ValueError, match="probability"):
        testbed.NoisyCritic(Fixed(FB), flip=1.5, seed=0)


def test_write_results_keeps_the_summary_small_and_publishes_only_when_asked(testbed, tmp_path, monkeypatch):
    monkeypatch.setenv(testbed.RESULTS_ENV, str(tmp_path / "results"))
    monkeypatch.setattr(testbed, "PUBLISHED", tmp_path / "docs-results")
    full, summary = {"runs": list(range(100))}, {"share": 0.123456789, "ci95": [float("nan"), 1.0], "n": 3}
    path = testbed.write_results("bench_x", full, summary, smoke=False, publish=False)
    assert json.loads(path.read_text()) == {"share": 0.1235, "ci95": [None, 1.0], "n": 3}  # strict JSON, 4 digits
    assert json.loads((tmp_path / "results" / "bench_x.json").read_text()) == full
    assert not (tmp_path / "docs-results").exists()
    testbed.write_results("bench_x", full, summary, smoke=False, publish=True)
    assert (tmp_path / "docs-results" / "bench_x.json").read_text() == path.read_text()
    with pytest.raises(SystemExit, match="never published"):
        testbed.write_results("bench_x", full, summary, smoke=True, publish=True)


def test_compact_json_puts_lists_of_values_on_one_line_and_reads_back_the_same(testbed):
    obj = {"a": [1, 2.5, None, "x, y"], "b": {"c": [[1, 2], [3]], "d": []}, "e": "[not a list]"}
    text = testbed.compact_json(obj)
    assert json.loads(text) == obj
    assert '"a": [1, 2.5, null, "x, y"]' in text and "[1, 2]" in text


def test_the_noisy_annotator_loop_returns_and_writes_the_noisy_labels(testbed, tmp_path):
    """The loop's annotator made imperfect: what it returns (a reward, the alarm's labels) and what it writes (what a
    refresh trains on) both have the labels flipped and no omissions; the clean answers stay in the cache."""
    import pandas as pd

    from t2g_core.config import AlignConfig, AnnotateConfig, PPOConfig
    from t2g_core.critique_loop import CritiqueLoop
    from t2g_core.demo import make_demo_feedback
    from t2g_core.ppo.rollout import row_dict
    from tests.core._taggers import tagger_cfg

    noisy_loop = importlib.import_module("testbed.noisy_annotator").NoisyAnnotatorLoop
    rows = [row_dict(r) for _, r in make_demo_feedback("summarization", 6, seed=0).iterrows()]
    decoded = [(row["response"], []) for row in rows]
    cfg = PPOConfig(steps=4, batch_size=4, seed=3, critique_loop={"enabled": True, "budget": 2})
    args = (cfg, AnnotateConfig(annotator="reference"), tagger_cfg(), AlignConfig())
    clean = CritiqueLoop(*args, tmp_path / "clean", None, rows)._annotate(rows, decoded, "0", tmp_path / "c")
    loop = noisy_loop(*args, tmp_path / "noisy", None, rows, flip=1.0)
    noisy = loop._annotate(rows, decoded, "0", tmp_path / "n")
    assert any(fb.missing for fb in clean) and any(fb.poor_spans for fb in clean)
    assert [(fb.good_spans, fb.poor_spans) for fb in noisy] == [(fb.poor_spans, fb.good_spans) for fb in clean]
    assert all(fb.missing == () for fb in noisy)
    written = pd.read_parquet(tmp_path / "n" / "annotations.parquet")
    assert [list(x) for x in written["poor_spans"]] == [fb.poor_spans for fb in noisy]
    assert all(len(m) == 0 for m in written["missing"])
