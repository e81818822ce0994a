"""KL coefficient controllers (Ziegler et al. 2019, as in lm-human-preferences).

    fixed:     beta_k = beta_0
    adaptive:  e = clip(KL / target - 1, -0.2, 0.2);  beta_{k+1} = beta_k (1 + e * n / horizon)

KL is the mean per-sequence KL (nats) of the batch; ``n`` the number of sequences in it.
Both expose ``state_dict`` / ``load_state_dict`` so a checkpoint restores beta exactly.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FixedKLController:
    value: float

    def update(self, current_kl: float, n_steps: int) -> float:
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])


@dataclass
class AdaptiveKLController:
    value: float
    target: float
    horizon: int

    def update(self, current_kl: float, n_steps: int) -> float:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict) -> None:
        self.value, self.target, self.horizon = float(state["value"]), float(state["target"]), int(state["horizon"])


def make_kl_controller(init: float, target: float | None, horizon: int) -> FixedKLController | AdaptiveKLController:
    """Adaptive towards ``target`` (nats per sequence), or fixed when there is none."""
    return FixedKLController(init) if target is None else AdaptiveKLController(init, target, horizon)
