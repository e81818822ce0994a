"""The credit-assignment property Text2Grad rests on, through the shipped reward placement and GAE.

A poor span on token k should change the advantage *at k* more than a scalar reward of the same total does, and
leave the tokens after k alone, whereas the scalar is credited to the last token and smeared over everything before it.
"""

from __future__ import annotations

import pytest
import torch

from t2g_core.rl import assemble_rewards, gae, masked_whiten, task_rewards

T, K = 12, 3


def _advantages(mode: str, labels: torch.Tensor, values: torch.Tensor, lam: float = 0.95) -> torch.Tensor:
    mask = torch.ones_like(labels, dtype=torch.bool)
    rewards = assemble_rewards(task_rewards(mode, labels, mask, 1.0), torch.zeros_like(labels), mask, beta=0.05)
    return gae(rewards, values, mask, 1.0, lam)[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poor_span_moves_the_advantage_at_its_token_more_than_a_scalar_of_the_same_total(seed):
    values = torch.randn(1, T, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    clean = torch.zeros(1, T, dtype=torch.float64)
    poor = clean.clone()
    poor[0, K] = -1.0
    delta = {
        m: (_advantages(m, poor, values) - _advantages(m, clean, values))[0] for m in ("span", "scalar", "uniform")
    }
    assert delta["span"][K] == pytest.approx(-1.0)
    assert abs(delta["span"][K]) > abs(delta["scalar"][K]) and abs(delta["span"][K]) > abs(delta["uniform"][K])
    assert torch.all(delta["span"][K + 1 :] == 0)  # tokens after the mistake are not blamed
    assert torch.all(delta["scalar"][K + 1 :] < 0)  # the scalar blames them all
    assert int(delta["span"].abs().argmax()) == K and int(delta["scalar"].abs().argmax()) == T - 1
    for m in ("scalar", "uniform"):  # same total reward, so the difference is placement only
        assert float(task_rewards(m, poor, torch.ones_like(poor, dtype=torch.bool), 1.0).sum()) == -1.0


def test_after_whitening_the_poor_token_is_the_most_negative_only_with_span_rewards():
    g = torch.Generator().manual_seed(3)
    labels = torch.zeros(8, T, dtype=torch.float64)
    bad = torch.randint(0, T, (8,), generator=g)
    labels[torch.arange(8), bad] = -1.0
    values = torch.zeros(8, T, dtype=torch.float64)  # zero-initialised value head
    mask = torch.ones_like(labels, dtype=torch.bool)
    span = masked_whiten(_advantages("span", labels, values, lam=0.95), mask)
    scalar = masked_whiten(_advantages("scalar", labels, values, lam=0.95), mask)
    hits_span = sum(int(span[b].argmin()) == int(bad[b]) for b in range(8))
    hits_scalar = sum(int(scalar[b].argmin()) == int(bad[b]) for b in range(8))
    assert hits_span == 8 and hits_scalar < 8
