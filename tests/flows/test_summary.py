"""The pipeline summary's stage lines: the reward model's headline held-out metrics are printed under its line."""

from __future__ import annotations

from flows.summary import _stage_line


def test_reward_model_line_shows_its_headline_metrics():
    line = _stage_line(
        "reward_model",
        {"adapter_dir": "/rm", "version": "3", "metrics": {"json_valid_rate": 1.0, "span_f1": 0.1786, "rouge_l": 0.5}},
    )
    first, second = line.splitlines()
    assert first.split() == ["reward_model", "adapter_dir=/rm,", "version=3"]
    assert second.split() == ["held-out:", "json_valid_rate=1.000,", "span_f1=0.179"]


def test_other_stage_lines_are_one_line():
    assert _stage_line("policy", {"adapter_dir": "/p", "steps": 40, "history": [1, 2]}).splitlines() == [
        "  policy        adapter_dir=/p, steps=40"
    ]
    assert _stage_line("evaluate", {"status": "not built", "reason": "why"}) == "  evaluate      NOT RUN: why"
