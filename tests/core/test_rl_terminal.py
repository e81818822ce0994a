"""The terminal reward (a critic's verdict, the hybrid scalar, the parse-failure, missing-EOS and degenerate rewards)
reaches every token under the span estimators, as its own advantage component with a leave-one-out baseline.

The case from the code critic: unit labels on 8 tokens, pass (v = +1) against fail (v = -1). With gae A(pass) -
A(fail) is 2 on every token; cutting the trace at each span dropped it to 0 before the last judged token."""

from __future__ import annotations

import pytest
import torch

from t2g_core.config.ppo import PPOConfig
from t2g_core.ppo.experience import advantages_and_returns
from t2g_core.rl import (
    assemble_rewards,
    estimate_advantages,
    segment_gae,
    segment_starts,
    terminal_advantages,
    unit_label_sums,
)

T = 8


def _code_case(verdict: float):
    mask = torch.ones(1, T, dtype=torch.bool)
    labels = torch.zeros(1, T, dtype=torch.float64)
    labels[0, 2], labels[0, 4], labels[0, 5] = 1.0, -1.0, -1.0  # a good line, a blamed line
    task = unit_label_sums(labels, mask)  # +1 and -0.5, -0.5
    terminal = torch.tensor([verdict], dtype=torch.float64)  # outcome_coef * v
    rewards = assemble_rewards(task, torch.zeros_like(task), mask, 0.0, terminal)
    return rewards, task, terminal, mask


@pytest.mark.parametrize("kind", ["gae", "span_local", "span_bootstrap"])
@pytest.mark.parametrize("lam", [1.0, 0.95])
def test_a_critics_verdict_reaches_every_token(kind, lam):
    adv = {}
    for verdict in (1.0, -1.0):
        rewards, task, terminal, mask = _code_case(verdict)
        values = torch.full_like(rewards, 0.3)
        adv[verdict], _ = estimate_advantages(
            kind, rewards, values, mask, task=task, terminal=terminal, group=None, gamma=1.0, lam=lam
        )
    diff = (adv[1.0] - adv[-1.0])[0]
    if kind == "gae" and lam < 1:
        assert diff.tolist() == pytest.approx([2.0 * lam ** (T - 1 - t) for t in range(T)])
    else:
        assert diff.tolist() == pytest.approx([2.0] * T)


def test_the_span_signal_keeps_its_segments_and_the_critic_learns_it_alone():
    rewards, task, terminal, mask = _code_case(1.0)
    values = torch.rand(1, T, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for bootstrap, kind in ((False, "span_local"), (True, "span_bootstrap")):
        adv, returns = estimate_advantages(
            kind, rewards, values, mask, task=task, terminal=terminal, group=None, gamma=1.0, lam=0.9
        )
        seg_adv, seg_ret = segment_gae(task, values, mask, segment_starts(task, mask), 1.0, 0.9, bootstrap)
        assert torch.allclose(adv, seg_adv + 1.0) and torch.allclose(returns, seg_ret)  # z = 1, no other sample


def _terminal_loop(z, mask, group, gamma):
    B, L = len(mask), len(mask[0])
    sizes = [group.count(g) for g in group] if group is not None else [1] * B
    pool = group if group is not None and min(sizes) >= 2 else [0] * B
    out = [[0.0] * L for _ in range(B)]
    for i in range(B):
        valid = [t for t in range(L) if mask[i][t]]
        others = [z[j] for j in range(B) if j != i and pool[j] == pool[i]]
        baseline = sum(others) / len(others) if others else 0.0
        for t in valid:
            out[i][t] = gamma ** (valid[-1] - t) * z[i] - baseline
    return out


@pytest.mark.parametrize("group", [None, [0, 0, 1, 1, 2, 2], [0, 1, 2, 3, 4, 5]])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_terminal_advantages_match_loop(group, gamma):
    g = torch.Generator().manual_seed(2)
    z = torch.randn(6, generator=g, dtype=torch.float64)
    lengths = torch.tensor([1, 7, 3, 7, 5, 2])
    mask = torch.arange(7)[None, :] < lengths[:, None]
    grp = None if group is None else torch.tensor(group)
    got = terminal_advantages(z, mask, grp, gamma)
    expected = _terminal_loop(z.tolist(), mask.tolist(), group, gamma)
    assert torch.allclose(got, torch.tensor(expected, dtype=z.dtype), atol=1e-12)
    one = terminal_advantages(z[:1], mask[:1], None, gamma)
    assert torch.allclose(one[0, :1], z[:1])  # no other sample: no baseline


def test_the_trainer_path_passes_the_terminal_on():
    """advantages_and_returns (what PPOTrainer.step calls) hands the terminal to the estimator: before whitening the
    pass/fail difference reaches token 0 under span_local."""
    cfg = PPOConfig(advantage_estimator="span_local", lam=1.0, batch_size=2)
    rows = [_code_case(v) for v in (1.0, -1.0)]
    rewards, task, terminal, mask = (torch.cat([r[k] for r in rows]) for k in range(4))
    adv, _ = advantages_and_returns(rewards, torch.zeros_like(rewards), mask, task, terminal, None, cfg)
    assert float(adv[0, 0]) > 0 > float(adv[1, 0])
