"""Each piece of PPO math against a plain Python loop (the shipped function is imported, never redefined)."""

from __future__ import annotations

import math

import pytest
import torch

from t2g_core.rl import (
    AdaptiveKLController,
    FixedKLController,
    assemble_rewards,
    gae,
    masked_mean,
    masked_var,
    masked_whiten,
    per_token_kl,
    policy_loss,
    position_ids_from_mask,
    task_rewards,
    token_logprobs,
    value_loss,
)


def _batch(seed: int = 0, B: int = 5, T: int = 9):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    return x, mask, g


def _valid(x, mask):
    return [float(x[b, t]) for b in range(x.shape[0]) for t in range(x.shape[1]) if mask[b, t]]


@pytest.mark.parametrize("seed", range(4))
def test_masked_mean_var_whiten_match_loop(seed):
    x, mask, _ = _batch(seed)
    vals = _valid(x, mask)
    mean = sum(vals) / len(vals)
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    assert float(masked_mean(x, mask)) == pytest.approx(mean, rel=1e-12)
    assert float(masked_var(x, mask)) == pytest.approx(var, rel=1e-12)
    w = masked_whiten(x, mask)
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            expected = (float(x[b, t]) - mean) / math.sqrt(var + 1e-8) if mask[b, t] else 0.0
            assert float(w[b, t]) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    w_keep = masked_whiten(x, mask, shift_mean=False)
    assert float(masked_mean(w_keep, mask)) == pytest.approx(mean, rel=1e-9, abs=1e-12)


def test_masked_stats_reduce_hook_gives_global_statistics():
    x, mask, _ = _batch(1)
    a, b = (x[:2], mask[:2]), (x[2:], mask[2:])

    def add_other_half(sums):  # what all_reduce(SUM) does with the other process's [sum, count]
        other_x, other_m = b
        if add_other_half.calls % 2 == 0:  # mean pass
            sums += torch.stack([(other_x * other_m).sum(), other_m.sum()]).to(sums.dtype)
        else:  # variance pass: squared deviations around the global mean
            mean = masked_mean(x, mask)
            sums += torch.stack([((other_x - mean) ** 2 * other_m).sum(), other_m.sum()]).to(sums.dtype)
        add_other_half.calls += 1

    add_other_half.calls = 0
    assert float(masked_mean(*a, reduce=add_other_half)) == pytest.approx(float(masked_mean(x, mask)), rel=1e-12)
    add_other_half.calls = 0
    assert float(masked_var(*a, reduce=add_other_half)) == pytest.approx(float(masked_var(x, mask)), rel=1e-12)


def test_empty_mask_is_an_error():
    with pytest.raises(ValueError, match="no element"):
        masked_mean(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool))


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_per_token_kl_matches_loop(estimator):
    lp, mask, g = _batch(2)
    ref = lp + 0.3 * torch.randn(lp.shape, generator=g, dtype=lp.dtype)
    lp, ref = -lp.abs(), -ref.abs()
    kl = per_token_kl(lp, ref, mask, estimator)
    for b in range(lp.shape[0]):
        for t in range(lp.shape[1]):
            a, r = float(lp[b, t]), float(ref[b, t])
            expected = (a - r) if estimator == "k1" else (math.exp(r - a) - 1) - (r - a)
            assert float(kl[b, t]) == pytest.approx(expected if mask[b, t] else 0.0, abs=1e-12)
    if estimator == "k3":
        assert (kl >= 0).all()


def test_per_token_kl_estimators_are_unbiased_on_samples():
    logits_p, logits_q = torch.tensor([1.0, 0.0, -1.0]), torch.tensor([0.0, 0.5, 0.0])
    p, q = torch.softmax(logits_p, -1), torch.softmax(logits_q, -1)
    true_kl = float((p * (p.log() - q.log())).sum())
    ids = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    lp, lq = p.log()[ids][None], q.log()[ids][None]
    mask = torch.ones_like(lp, dtype=torch.bool)
    for est in ("k1", "k3"):
        assert float(per_token_kl(lp, lq, mask, est).mean()) == pytest.approx(true_kl, abs=5e-3)


def _gae_loop(r, v, m, gamma, lam):
    B, T = len(r), len(r[0])
    adv = [[0.0] * T for _ in range(B)]
    for b in range(B):
        valid = [t for t in range(T) if m[b][t]]
        last, next_v = 0.0, 0.0
        for t in reversed(valid):
            delta = r[b][t] + gamma * next_v - v[b][t]
            last = delta + gamma * lam * last
            adv[b][t] = last
            next_v = v[b][t]
    ret = [[(adv[b][t] + v[b][t]) if m[b][t] else 0.0 for t in range(T)] for b in range(B)]
    return adv, ret


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.5), (1.0, 1.0), (0.99, 0.0)])
@pytest.mark.parametrize("holes", [False, True])
def test_gae_matches_loop(gamma, lam, holes):
    r, mask, g = _batch(3, B=6, T=11)
    v = torch.randn(r.shape, generator=g, dtype=r.dtype)
    if holes:  # masked tokens inside a response (e.g. boilerplate) are skipped, not treated as the end
        mask = mask.clone()
        mask[:, 2] = False
    adv, ret = gae(r, v, mask, gamma, lam)
    adv_l, ret_l = _gae_loop(r.tolist(), v.tolist(), mask.tolist(), gamma, lam)
    assert torch.allclose(adv, torch.tensor(adv_l, dtype=r.dtype), atol=1e-12)
    assert torch.allclose(ret, torch.tensor(ret_l, dtype=r.dtype), atol=1e-12)


def test_gae_with_lambda_one_gamma_one_is_reward_to_go_minus_value():
    r, mask, g = _batch(4)
    v = torch.randn(r.shape, generator=g, dtype=r.dtype)
    adv, _ = gae(r, v, mask, 1.0, 1.0)
    rm = r * mask
    to_go = rm.flip(1).cumsum(1).flip(1)
    assert torch.allclose(adv, (to_go - v) * mask, atol=1e-12)


def _policy_loss_loop(lp, old, adv, m, eps):
    total, n, clipped_n, kl = 0.0, 0, 0, 0.0
    for b in range(len(lp)):
        for t in range(len(lp[b])):
            if not m[b][t]:
                continue
            ratio = math.exp(lp[b][t] - old[b][t])
            a = -adv[b][t] * ratio
            c = -adv[b][t] * min(max(ratio, 1 - eps), 1 + eps)
            total += max(a, c)
            clipped_n += c > a
            kl += (ratio - 1) - math.log(ratio)
            n += 1
    return total / n, clipped_n / n, kl / n


def test_policy_loss_matches_loop():
    lp, mask, g = _batch(5)
    old = lp + 0.4 * torch.randn(lp.shape, generator=g, dtype=lp.dtype)
    adv = torch.randn(lp.shape, generator=g, dtype=lp.dtype)
    loss, stats = policy_loss(lp, old, adv, mask, 0.2)
    e_loss, e_clip, e_kl = _policy_loss_loop(lp.tolist(), old.tolist(), adv.tolist(), mask.tolist(), 0.2)
    assert float(loss) == pytest.approx(e_loss, rel=1e-10)
    assert float(stats["clipfrac"]) == pytest.approx(e_clip, rel=1e-10)
    assert float(stats["approx_kl"]) == pytest.approx(e_kl, rel=1e-10)
    assert 0 < e_clip < 1


def test_policy_loss_at_ratio_one_is_minus_mean_advantage_and_no_clip():
    lp, mask, g = _batch(6)
    adv = torch.randn(lp.shape, generator=g, dtype=lp.dtype)
    loss, stats = policy_loss(lp, lp.clone(), adv, mask, 0.2)
    assert float(loss) == pytest.approx(-float(masked_mean(adv, mask)), rel=1e-12)
    assert float(stats["clipfrac"]) == 0.0 and float(stats["approx_kl"]) == 0.0 and float(stats["ratio"]) == 1.0


def test_policy_loss_normalizer_splits_sum_exactly():
    lp, mask, g = _batch(7)
    old = lp + 0.1 * torch.randn(lp.shape, generator=g, dtype=lp.dtype)
    adv = torch.randn(lp.shape, generator=g, dtype=lp.dtype)
    whole, _ = policy_loss(lp, old, adv, mask, 0.2)
    n = mask.sum()
    parts = sum(
        policy_loss(lp[s], old[s], adv[s], mask[s], 0.2, normalizer=n)[0] for s in (slice(0, 2), slice(2, None))
    )
    assert float(parts) == pytest.approx(float(whole), rel=1e-12)


def test_value_loss_matches_loop():
    v, mask, g = _batch(8)
    old = v + 0.5 * torch.randn(v.shape, generator=g, dtype=v.dtype)
    ret = torch.randn(v.shape, generator=g, dtype=v.dtype)
    loss, _ = value_loss(v, old, ret, mask, 0.2)
    total, n = 0.0, 0
    for b in range(v.shape[0]):
        for t in range(v.shape[1]):
            if mask[b, t]:
                vc = float(old[b, t]) + min(max(float(v[b, t] - old[b, t]), -0.2), 0.2)
                total += max((float(v[b, t]) - float(ret[b, t])) ** 2, (vc - float(ret[b, t])) ** 2)
                n += 1
    assert float(loss) == pytest.approx(0.5 * total / n, rel=1e-10)


def test_reward_modes_have_equal_totals_and_different_placement():
    labels = torch.tensor([[0, 1, 0, -1, 0, -1, 0], [1, 0, 0, 0, 0, 0, 0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    span = task_rewards("span", labels, mask, 2.0)
    scalar = task_rewards("scalar", labels, mask, 2.0)
    uniform = task_rewards("uniform", labels, mask, 2.0)
    dense = task_rewards("dense", labels, mask, 2.0)  # word labels are placed like span labels
    for row in range(2):
        totals = {float(x[row].sum()) for x in (span, scalar, uniform, dense)}
        assert max(totals) - min(totals) < 1e-12
    assert span.tolist()[0] == [0, 2, 0, -2, 0, -2, 0] and torch.equal(dense, span)
    assert scalar.tolist()[0] == [0, 0, 0, 0, 0, -2, 0]  # last real token, not the PAD after it
    assert scalar.tolist()[1] == [0, 0, 2, 0, 0, 0, 0]
    assert uniform.tolist()[1] == pytest.approx([2 / 3] * 3 + [0] * 4)
    with pytest.raises(ValueError, match="reward_mode"):
        task_rewards("sparse", labels, mask, 1.0)


def test_assemble_rewards_matches_loop():
    task, mask, g = _batch(9)
    kl = torch.randn(task.shape, generator=g, dtype=task.dtype)
    terminal = torch.randn(task.shape[0], generator=g, dtype=task.dtype)
    r = assemble_rewards(task, kl, mask, 0.05, terminal)
    for b in range(task.shape[0]):
        last = max(t for t in range(task.shape[1]) if mask[b, t])
        for t in range(task.shape[1]):
            expected = (float(task[b, t]) - 0.05 * float(kl[b, t])) if mask[b, t] else 0.0
            expected += float(terminal[b]) if t == last else 0.0
            assert float(r[b, t]) == pytest.approx(expected, abs=1e-12)


def test_kl_controllers():
    fixed = FixedKLController(0.1)
    assert fixed.update(100.0, 64) == 0.1
    ada = AdaptiveKLController(0.1, target=6.0, horizon=10_000)
    assert ada.update(12.0, 100) == pytest.approx(0.1 * (1 + 0.2 * 100 / 10_000))  # error clipped at +0.2
    beta = ada.value
    assert ada.update(6.0 * 0.9, 100) == pytest.approx(beta * (1 - 0.1 * 100 / 10_000))
    clone = AdaptiveKLController(1.0, 1.0, 1)
    clone.load_state_dict(ada.state_dict())
    assert clone == ada


def test_token_logprobs_and_positions():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, generator=g)
    ids = torch.randint(0, 5, (2, 3), generator=g)
    lp = token_logprobs(logits, ids, sampling=0.7)
    for b in range(2):
        for t in range(3):
            z = [float(x) / 0.7 for x in logits[b, t]]
            lse = math.log(sum(math.exp(v) for v in z))
            assert float(lp[b, t]) == pytest.approx(z[int(ids[b, t])] - lse, rel=1e-5)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
