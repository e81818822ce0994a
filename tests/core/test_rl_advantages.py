"""Advantage estimators, omission labels and the new logged statistics against plain Python loops (the shipped
functions are imported, never redefined)."""

from __future__ import annotations

import math

import pytest
import torch

from t2g_core.rl import (
    estimate_advantages,
    explained_variance,
    gae,
    grpo_advantages,
    omission_labels,
    reward_to_go,
    rloo_advantages,
    segment_gae,
    segment_starts,
    token_entropy,
)


def _batch(seed: int = 0, B: int = 6, T: int = 10):
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(B, T, generator=g, dtype=torch.float64)
    v = torch.randn(B, T, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    labels = torch.randint(-1, 2, (B, T), generator=g).to(torch.float64) * mask
    return r, v, mask, labels, g


# ---------------------------------------------------------------------------------------------- omissions


def _omission_loop(missing, mask, p, placement):
    B, T = len(missing), len(missing[0])
    out = [[0.0] * T for _ in range(B)]
    for b in range(B):
        valid = [t for t in range(T) if mask[b][t]]
        last = valid[-1] if valid else 0
        for t in range(T):
            if placement == "anchor" and mask[b][t]:
                out[b][t] -= p * missing[b][t]
            elif valid:  # "end", or an anchor on padding: the last real token
                out[b][last] -= p * missing[b][t]
    return out


@pytest.mark.parametrize("placement", ["anchor", "end"])
def test_omission_labels_match_loop(placement):
    _, _, mask, _, g = _batch(1)
    missing = torch.randint(0, 3, mask.shape, generator=g).to(torch.float64)  # some anchors fall on padding
    got = omission_labels(missing, mask, 1.5, placement)
    expected = _omission_loop(missing.tolist(), mask.tolist(), 1.5, placement)
    assert torch.allclose(got, torch.tensor(expected, dtype=got.dtype))
    assert torch.allclose(got.sum(1), -1.5 * missing.sum(1))  # nothing is lost to padding
    with pytest.raises(ValueError, match="placement"):
        omission_labels(missing, mask, 1.0, "middle")


# ---------------------------------------------------------------------------------------------- segments


def _starts_loop(task, mask):
    out = []
    for row, m in zip(task, mask, strict=True):
        valid = [t for t in range(len(row)) if m[t]]
        starts = [False] * len(row)
        for prev, t in zip(valid, valid[1:], strict=False):
            starts[t] = row[prev] != 0 and row[t] != row[prev]
        out.append(starts)
    return out


def test_a_segment_starts_on_the_first_token_after_each_labelled_run():
    task = torch.tensor([[0, 1, 1, 0, -1, -1, 1, 0], [2, 2, 2, 2, 0, 0, 0, 0]], dtype=torch.float64)
    mask = torch.tensor([[1] * 8, [1, 1, 1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    assert segment_starts(task, mask).long().tolist() == [[0, 0, 0, 1, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0]]
    for seed in range(3):
        _, _, mask, labels, _ = _batch(seed)
        assert segment_starts(labels, mask).tolist() == _starts_loop(labels.tolist(), mask.tolist())


def _segment_loop(r, v, m, starts, gamma, lam, bootstrap):
    """Forward definition: each token's trace runs to the next segment start H(t), that start included."""
    B, T = len(r), len(r[0])
    adv = [[0.0] * T for _ in range(B)]
    ret = [[0.0] * T for _ in range(B)]
    for b in range(B):
        valid = [t for t in range(T) if m[b][t]]
        for i, t in enumerate(valid):
            horizon = next((u for u in valid[i + 1 :] if starts[b][u]), valid[-1])
            span = [u for u in valid[i:] if u <= horizon]
            if bootstrap:
                nxt = {u: (valid[valid.index(u) + 1] if u != valid[-1] else None) for u in span}
                deltas = [r[b][u] + gamma * (v[b][nxt[u]] if nxt[u] is not None else 0.0) - v[b][u] for u in span]
                adv[b][t] = sum((gamma * lam) ** k * d for k, d in enumerate(deltas))
                ret[b][t] = adv[b][t] + v[b][t]
            else:
                ret[b][t] = sum(gamma**k * r[b][u] for k, u in enumerate(span))
                adv[b][t] = ret[b][t] - v[b][t]
    return adv, ret


@pytest.mark.parametrize("bootstrap", [False, True])
@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (1.0, 1.0), (0.9, 0.5)])
def test_segment_gae_matches_its_forward_definition(bootstrap, gamma, lam):
    r, v, mask, labels, _ = _batch(2)
    mask[0, 3] = False  # a masked position inside a sequence is skipped
    starts = segment_starts(labels, mask)
    adv, ret = segment_gae(r, v, mask, starts, gamma, lam, bootstrap)
    adv_l, ret_l = _segment_loop(r.tolist(), v.tolist(), mask.tolist(), starts.tolist(), gamma, lam, bootstrap)
    assert torch.allclose(adv, torch.tensor(adv_l, dtype=r.dtype), atol=1e-10)
    assert torch.allclose(ret, torch.tensor(ret_l, dtype=r.dtype), atol=1e-10)


def test_segment_gae_without_starts_is_gae():
    r, v, mask, _, _ = _batch(3)
    a, ret = segment_gae(r, v, mask, torch.zeros_like(mask), 1.0, 0.95, bootstrap=True)
    a2, ret2 = gae(r, v, mask, 1.0, 0.95)
    assert torch.allclose(a, a2, atol=1e-12) and torch.allclose(ret, ret2, atol=1e-12)
    a, ret = segment_gae(r, v, mask, torch.zeros_like(mask), 1.0, 0.95, bootstrap=False)
    a2, ret2 = gae(r, v, mask, 1.0, 1.0)  # without a bootstrap, Monte Carlo inside the horizon
    assert torch.allclose(a, a2, atol=1e-12) and torch.allclose(ret, ret2, atol=1e-12)


def test_span_local_keeps_later_spans_off_earlier_tokens_and_bootstrap_keeps_the_value_of_going_on():
    T = 10
    mask = torch.ones(1, T, dtype=torch.bool)
    task = torch.zeros(1, T, dtype=torch.float64)
    task[0, 2], task[0, 6] = 1.0, -1.0
    values = torch.full((1, T), 0.5, dtype=torch.float64)
    local, _ = estimate_advantages(
        "span_local", task, values, mask, task=task, terminal=None, group=None, gamma=1.0, lam=1.0
    )
    boot, _ = estimate_advantages(
        "span_bootstrap", task, values, mask, task=task, terminal=None, group=None, gamma=1.0, lam=1.0
    )
    full, _ = estimate_advantages("gae", task, values, mask, task=task, terminal=None, group=None, gamma=1.0, lam=1.0)
    assert local[0, :3].tolist() == pytest.approx([0.5, 0.5, 0.5])  # +1 - V: the later -1 does not reach them
    assert full[0, :3].tolist() == pytest.approx([-0.5, -0.5, -0.5])  # +1 - 1 - V
    assert boot[0, :3].tolist() == pytest.approx([1.0, 1.0, 1.0])  # +1 + V(after the span) - V
    assert local[0, 3:].tolist() == full[0, 3:].tolist()  # nothing follows the last span: local = full credit
    assert boot[0, 3:7].tolist() == pytest.approx([-1.0] * 4)  # -1 + V(tail) - V


# ---------------------------------------------------------------------------------------------- group baselines


def _to_go_loop(r, m, gamma):
    out = [[0.0] * len(r[0]) for _ in r]
    for b in range(len(r)):
        acc = 0.0
        for t in reversed(range(len(r[0]))):
            if m[b][t]:
                acc = r[b][t] + gamma * acc
                out[b][t] = acc
    return out


def _group_loop(r, m, group, gamma, kind, floor=1.0):
    G = _to_go_loop(r, m, gamma)
    B, T = len(r), len(r[0])
    out = [[0.0] * T for _ in range(B)]
    for i in range(B):
        mates = [j for j in range(B) if group[j] == group[i]]
        for t in range(T):
            if not m[i][t]:
                continue
            column = [G[j][t] for j in mates]  # 0 for a mate past its end
            mean = sum(column) / len(column)
            if kind == "rloo":
                out[i][t] = G[i][t] - (sum(column) - G[i][t]) / (len(column) - 1)
            elif kind == "grpo_none":
                out[i][t] = G[i][t] - mean
            else:
                std = math.sqrt(sum((x - mean) ** 2 for x in column) / (len(column) - 1))
                out[i][t] = (G[i][t] - mean) / max(std, floor)
    return out


def test_reward_to_go_matches_loop():
    r, _, mask, _, _ = _batch(4)
    expected = torch.tensor(_to_go_loop(r.tolist(), mask.tolist(), 0.9), dtype=r.dtype)
    assert torch.allclose(reward_to_go(r, mask, 0.9), expected)


@pytest.mark.parametrize("kind", ["rloo", "grpo_none", "grpo_position_std"])
def test_group_baselines_match_loop(kind):
    r, _, mask, _, _ = _batch(5, B=8)
    group = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])  # groups of 3, 2 and 3 samples
    estimator, _, scale = kind.partition("_")
    floor = 0.3 if scale == "position_std" else None  # grpo divides by the floored position std, or by nothing
    if estimator == "rloo":
        got = rloo_advantages(r, mask, group, 1.0)
    else:
        got = grpo_advantages(r, mask, group, 1.0, std_floor=floor)
    expected = _group_loop(r.tolist(), mask.tolist(), group.tolist(), 1.0, kind, floor=0.3)
    assert torch.allclose(got, torch.tensor(expected, dtype=r.dtype), atol=1e-10)
    adv, returns = estimate_advantages(
        estimator,
        r,
        r,
        mask,
        task=r,
        terminal=None,
        group=group,
        gamma=1.0,
        lam=0.95,
        grpo_std_floor=floor,
    )
    assert torch.allclose(adv, got) and float(returns.abs().sum()) == 0.0  # no critic, no value targets


def test_grpo_stays_bounded_when_a_group_ties_its_totals_and_the_other_group_keeps_its_share():
    """Two prompts, two samples each, +-1 labels and a small KL: the first group's totals tie (+1 -1 vs -1 +1) while
    their per-token returns differ; dividing by the std of the totals made |A| ~260 at beta 0.05 (1e6 at beta 0),
    and after whitening the second group's advantages vanished (< 0.01)."""
    from t2g_core.rl import assemble_rewards, masked_whiten

    labels = torch.tensor([[1, -1, 0, 0], [-1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, -1]], dtype=torch.float64)
    mask = torch.ones(4, 4, dtype=torch.bool)
    group = torch.tensor([0, 0, 1, 1])
    kl = torch.rand(4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.1
    for beta in (0.05, 0.0):
        rewards = assemble_rewards(labels, kl, mask, beta)
        for floor in (None, 1.0):  # no scaling, or the position std floored at one label
            adv, _ = estimate_advantages(
                "grpo",
                rewards,
                rewards,
                mask,
                task=labels,
                terminal=None,
                group=group,
                gamma=1.0,
                lam=1.0,
                grpo_std_floor=floor,
            )
            assert float(adv.abs().max()) <= 2.0 + 1e-9, (beta, floor, adv)  # at most the spread of the returns
            white = masked_whiten(adv, mask)
            assert float(white[2:].abs().max()) > 0.5, (beta, floor, white)  # the other group still counts
            assert float(adv[2, 0] - adv[3, 0]) > 0  # +1 beats -1 in the untied group


def test_rloo_credits_the_token_that_differs_between_samples_of_one_prompt():
    """Two samples of one prompt that differ only in one labelled token: only that token (and the tokens before
    it, whose reward-to-go includes it) get credit, with opposite signs; the identical tail gets none."""
    T = 6
    rewards = torch.zeros(2, T, dtype=torch.float64)
    rewards[0, 3], rewards[1, 3] = 1.0, -1.0
    mask = torch.ones(2, T, dtype=torch.bool)
    adv = rloo_advantages(rewards, mask, torch.tensor([0, 0]), 1.0)
    assert adv[0, :4].tolist() == [2.0] * 4 and adv[1, :4].tolist() == [-2.0] * 4
    assert adv[:, 4:].abs().sum() == 0


def test_group_baselines_refuse_singleton_groups():
    r, _, mask, _, _ = _batch(6, B=3)
    with pytest.raises(ValueError, match="at least 2 samples"):
        rloo_advantages(r, mask, torch.tensor([0, 0, 1]), 1.0)
    with pytest.raises(ValueError, match="group"):
        estimate_advantages("grpo", r, r, mask, task=r, terminal=None, group=None, gamma=1.0, lam=1.0)
    with pytest.raises(ValueError, match="advantage estimator"):
        estimate_advantages("vtrace", r, r, mask, task=r, terminal=None, group=None, gamma=1.0, lam=1.0)


# ---------------------------------------------------------------------------------------------- logged statistics


def test_explained_variance_and_entropy_match_loops():
    r, v, mask, _, g = _batch(7)
    vals = [(float(r[b, t]), float(v[b, t])) for b in range(r.shape[0]) for t in range(r.shape[1]) if mask[b, t]]
    ret = [x for x, _ in vals]
    err = [x - y for x, y in vals]

    def var(xs):
        mu = sum(xs) / len(xs)
        return sum((x - mu) ** 2 for x in xs) / len(xs)

    assert explained_variance(v, r, mask) == pytest.approx(1 - var(err) / var(ret), rel=1e-9)
    assert explained_variance(r, r, mask) == pytest.approx(1.0)
    logits = torch.randn(2, 3, 5, generator=g)
    ent = token_entropy(logits, sampling=0.7)
    for b in range(2):
        for t in range(3):
            z = [float(x) / 0.7 for x in logits[b, t]]
            lse = math.log(sum(math.exp(x) for x in z))
            p = [math.exp(x - lse) for x in z]
            assert float(ent[b, t]) == pytest.approx(-sum(q * math.log(q) for q in p), rel=1e-5)
