"""The span estimators' horizons are decided from the labels up to each token, so with the true value function
span_bootstrap returns the true advantage and span_local the true local one (the return up to the token after the
run a token belongs to or leads into). Toy token MDPs are enumerated exactly: every trajectory, its probability and
the true values; the estimators are the shipped ones, run on each trajectory as the trainer would.

Stopping a token's trace at the *last* token of its run reads the next token's label: a good token whose successor
tends to be good then collects that successor's advantage. In the first toy that scores the worse action +0.38 and
the better one +0.10 under span_bootstrap (true V), and makes span_local prefer it too (+1.4 against +1.0 local
return)."""

from __future__ import annotations

import random

import pytest
import torch

from t2g_core.rl import estimate_advantages, segment_starts


def _horizon(labels: list[float], t: int) -> int:
    """The first token after the run that token t belongs to or leads into (the last token if none): a loop twin of
    segment_starts stated on its own."""
    u = t
    while u < len(labels) and labels[u] == 0:  # a neutral token leads into the next run
        u += 1
    while u + 1 < len(labels) and labels[u + 1] == labels[u]:  # to the end of that run
        u += 1
    return min(u + 1, len(labels) - 1)


class Toy:
    """A token MDP: ``policy(prefix) -> {token: probability}``; each token's label is its reward (no KL, no
    terminal); responses are ``length`` tokens long."""

    def __init__(self, policy, labels: dict[str, float], length: int):
        self.policy, self.labels, self.length = policy, labels, length

    def continuations(self, prefix: tuple):
        if len(prefix) == self.length:
            yield prefix, 1.0
            return
        for token, p in self.policy(prefix).items():
            for rest, q in self.continuations((*prefix, token)):
                yield rest, p * q

    def value(self, prefix: tuple, local: bool) -> float:
        """E[return from len(prefix) on | prefix]; ``local``: only up to the horizon of that token."""
        t, total = len(prefix), 0.0
        for traj, p in self.continuations(prefix):
            labels = [self.labels[x] for x in traj]
            end = _horizon(labels, t) if local else len(labels) - 1
            total += p * sum(labels[t : end + 1])
        return total

    def advantage(self, first: str, local: bool) -> float:
        """The true (local) advantage of ``first`` as the response's first token."""
        total = 0.0
        for traj, p in self.continuations((first,)):
            labels = [self.labels[x] for x in traj]
            end = _horizon(labels, 0) if local else len(labels) - 1
            total += p * sum(labels[: end + 1])
        return total - self.value((), local)

    def estimated(self, kind: str, lam: float) -> dict[str, float]:
        """E[A_0 | first token] of the shipped estimator, with the true values (local ones for span_local)."""
        local = kind == "span_local"
        sums: dict[str, list[float]] = {}
        for traj, p in self.continuations(()):
            r = torch.tensor([[self.labels[x] for x in traj]], dtype=torch.float64)
            v = torch.tensor([[self.value(traj[:t], local) for t in range(len(traj))]], dtype=torch.float64)
            m = torch.ones_like(r, dtype=torch.bool)
            adv, _ = estimate_advantages(kind, r, v, m, task=r, terminal=None, group=None, gamma=1.0, lam=lam)
            acc = sums.setdefault(traj[0], [0.0, 0.0])
            acc[0] += p * float(adv[0, 0])
            acc[1] += p
        return {first: s / w for first, (s, w) in sums.items()}


# B(etter) and W(orse) are both good tokens; after B comes a neutral token, after W a good one (0.4) or a poor one
# (0.6): Q(B) = 1 > Q(W) = 0.8, V = 0.9, true advantages +0.1 and -0.1 (local ones too: the horizon of either
# first token is the token after it).
BRANCH = Toy(
    lambda prefix: {"B": 0.5, "W": 0.5} if not prefix else ({"N": 1.0} if prefix[-1] == "B" else {"G": 0.4, "P": 0.6}),
    {"B": 1.0, "W": 1.0, "N": 0.0, "G": 1.0, "P": -1.0},
    length=2,
)


@pytest.mark.parametrize("kind", ["span_bootstrap", "span_local"])
@pytest.mark.parametrize("lam", [1.0, 0.9])
def test_with_the_true_values_the_better_action_scores_higher(kind, lam):
    est = BRANCH.estimated(kind, lam)
    assert est["B"] > est["W"], est
    assert est["B"] == pytest.approx(BRANCH.advantage("B", kind == "span_local")) == pytest.approx(0.1)
    assert est["W"] == pytest.approx(BRANCH.advantage("W", kind == "span_local")) == pytest.approx(-0.1)


def _random_toy(seed: int) -> Toy:
    """Labels -1, 0, 0.5, 1; each token's distribution depends on the previous token."""
    rng = random.Random(seed)
    tokens = {"P": -1.0, "N": 0.0, "h": 0.5, "G": 1.0}
    table = {prev: [rng.random() for _ in tokens] for prev in (None, *tokens)}

    def policy(prefix):
        w = table[prefix[-1] if prefix else None]
        return {x: q / sum(w) for x, q in zip(tokens, w, strict=True)}

    return Toy(policy, tokens, length=4)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["span_bootstrap", "span_local"])
def test_with_the_true_values_the_estimate_is_the_true_advantage(seed, kind):
    toy = _random_toy(seed)
    local = kind == "span_local"
    for lam in (1.0, 0.7):
        est = toy.estimated(kind, lam)
        for first, a in est.items():
            assert a == pytest.approx(toy.advantage(first, local), abs=1e-12), (first, lam)


def test_a_segment_start_never_depends_on_a_later_label():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        task = torch.randint(-1, 2, (3, 9), generator=g).to(torch.float64)
        mask = torch.ones_like(task, dtype=torch.bool)
        for t in range(9):
            changed = task.clone()
            changed[:, t + 1 :] = torch.randint(-1, 2, changed[:, t + 1 :].shape, generator=g).to(torch.float64)
            assert torch.equal(segment_starts(task, mask)[:, : t + 1], segment_starts(changed, mask)[:, : t + 1])
