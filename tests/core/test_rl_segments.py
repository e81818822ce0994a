"""The span estimators' segment ends are decided from the labels up to each token, so with the true value function
span_bootstrap is an unbiased estimate of the advantage and span_local of the local one. Toy token MDPs are
enumerated exactly: every trajectory, its probability, and the true values computed by recursion; the estimators
are the shipped ones, run on each trajectory as the trainer would.

The old rule ended a segment on the *last* token of a run of equal labels, which reads the next token's label: a good
token whose successor tends to be good then collected that successor's advantage. In the first toy that scored the
worse action +0.38 and the better one +0.10 (span_bootstrap, true V); in the second, span_local preferred a +0.5
token over a +1 one."""

from __future__ import annotations

import pytest
import torch

from t2g_core.rl import estimate_advantages, segment_ends


class Toy:
    """A token MDP: ``policy(prefix) -> {token: probability}``, each token's label is its reward (no KL, no
    terminal), responses are ``length`` tokens long."""

    def __init__(self, policy, labels: dict[str, float], length: int):
        self.policy, self.labels, self.length = policy, labels, length
        self.values: dict[tuple[tuple, bool], float] = {}

    def trajectories(self, prefix=()):
        if len(prefix) == self.length:
            yield prefix, 1.0
            return
        for token, p in self.policy(prefix).items():
            for rest, q in self.trajectories((*prefix, token)):
                yield rest, p * q

    def value(self, prefix: tuple, local: bool = False) -> float:
        """Expected return from ``prefix`` on; ``local``: only up to the first token with a label (that token
        included), the episode span_local credits (the rule stated independently of the shipped function)."""
        if len(prefix) == self.length:
            return 0.0
        if (prefix, local) not in self.values:
            total = 0.0
            for token, p in self.policy(prefix).items():
                ends = local and self.labels[token] != 0
                total += p * (self.labels[token] + (0.0 if ends else self.value((*prefix, token), local)))
            self.values[prefix, local] = total
        return self.values[prefix, local]

    def advantage(self, first: str, local: bool) -> float:
        """The true advantage of ``first`` as the response's first token (total or local return)."""
        after = 0.0 if local and self.labels[first] != 0 else self.value((first,), local)
        return self.labels[first] + after - self.value((), local)

    def estimated(self, kind: str, lam: float) -> dict[str, float]:
        """E[A_0 | first token] of the shipped estimator, with the true values (local ones for span_local)."""
        local = kind == "span_local"
        sums: dict[str, list[float]] = {}
        for traj, p in self.trajectories():
            r = torch.tensor([[self.labels[x] for x in traj]], dtype=torch.float64)
            v = torch.tensor([[self.value(traj[:t], local) for t in range(len(traj))]], dtype=torch.float64)
            m = torch.ones_like(r, dtype=torch.bool)
            adv, _ = estimate_advantages(kind, r, v, m, task=r, terminal=None, group=None, gamma=1.0, lam=lam)
            acc = sums.setdefault(traj[0], [0.0, 0.0])
            acc[0] += p * float(adv[0, 0])
            acc[1] += p
        return {first: s / w for first, (s, w) in sums.items()}


# B(etter) and W(orse) are both good tokens; after B comes a neutral token, after W a good one (0.4) or a poor one
# (0.6): Q(B) = 1 > Q(W) = 0.8, V = 0.9, true advantages +0.1 and -0.1.
BRANCH = Toy(
    lambda prefix: {"B": 0.5, "W": 0.5} if not prefix else ({"N": 1.0} if prefix[-1] == "B" else {"G": 0.4, "P": 0.6}),
    {"B": 1.0, "W": 1.0, "N": 0.0, "G": 1.0, "P": -1.0},
    length=2,
)
# independent tokens: a good one (+1, rare) or a half-good one (+0.5, frequent), so runs of +0.5 are long
INDEPENDENT = Toy(lambda prefix: {"G": 0.1, "g": 0.9}, {"G": 1.0, "g": 0.5}, length=4)


@pytest.mark.parametrize("lam", [1.0, 0.9])
def test_span_bootstrap_with_the_true_values_scores_the_better_action_higher_and_is_unbiased(lam):
    est = BRANCH.estimated("span_bootstrap", lam)
    assert est["B"] > est["W"], est
    for first in ("B", "W"):
        assert est[first] == pytest.approx(BRANCH.advantage(first, local=False), abs=1e-12)


@pytest.mark.parametrize("lam", [1.0, 0.9])
def test_span_local_with_its_true_values_scores_the_better_token_higher(lam):
    """Independent tokens, so the local credit orders them as the total return does: G (+1) above g (+0.5)."""
    est = INDEPENDENT.estimated("span_local", lam)
    assert est["G"] > est["g"], est
    for first in ("G", "g"):
        assert est[first] == pytest.approx(INDEPENDENT.advantage(first, local=True), abs=1e-12)
    assert est["G"] - est["g"] == pytest.approx(0.5)
    boot = INDEPENDENT.estimated("span_bootstrap", lam)
    assert boot["G"] - boot["g"] == pytest.approx(0.5)


def test_a_segment_end_never_depends_on_a_later_label():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        task = torch.randint(-1, 2, (3, 9), generator=g).to(torch.float64)
        mask = torch.ones_like(task, dtype=torch.bool)
        for t in range(9):
            changed = task.clone()
            changed[:, t + 1 :] = torch.randint(-1, 2, changed[:, t + 1 :].shape, generator=g).to(torch.float64)
            assert torch.equal(segment_ends(task, mask)[:, : t + 1], segment_ends(changed, mask)[:, : t + 1])
