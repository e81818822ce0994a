"""When the reward source fails, PPO stops: a run rewarded by failures must not finish as a trained policy.

A few failed critiques are noise (each gets ``ppo.parse_failure_reward``); a step failure rate
(``parse/failure_rate``) above ``ppo.max_reward_failure_rate`` for ``ppo.reward_failure_patience`` steps in a row
means PPO trains on the failure reward alone, so :func:`check_reward_source` raises (docs/ppo.md). The streak is read
from the metric history, so a resumed run counts the steps before its checkpoint too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from t2g_core.config.ppo import PPOConfig

RATE = "parse/failure_rate"


class RewardSourceFailed(RuntimeError):
    """The reward source failed on too many rollouts for too many steps in a row; the message says what failed."""


def failure_streak(history: Sequence[dict], max_rate: float) -> int:
    """Consecutive steps at the end of ``history`` whose failure rate is above ``max_rate``."""
    streak = 0
    for entry in reversed(history):
        if entry.get(RATE, 0.0) <= max_rate:
            break
        streak += 1
    return streak


def check_reward_source(history: Sequence[dict], cfg: PPOConfig, errors: Sequence[str | None]) -> None:
    """Raise :class:`RewardSourceFailed` when the last ``reward_failure_patience`` steps all failed on more than
    ``max_reward_failure_rate`` of their rollouts; ``errors`` are the last step's failed rollouts' errors."""
    patience = cfg.reward_failure_patience
    if cfg.max_reward_failure_rate >= 1 or failure_streak(history, cfg.max_reward_failure_rate) < patience:
        return
    rates = ", ".join(f"{h[RATE]:.0%}" for h in history[-patience:])
    common = Counter(e.splitlines()[0][:200] if e else "no error text" for e in errors).most_common(3)
    seen = "; ".join(f"{n} x {e}" for e, n in common) or "no error text"
    raise RewardSourceFailed(
        f"PPO stopped at step {history[-1].get('step')}: the reward source ({cfg.reward_source}) failed on {rates} "
        f"of the rollouts of the last {patience} steps (ppo.max_reward_failure_rate = "
        f"{cfg.max_reward_failure_rate}). Last errors: {seen}. The recorded rollouts (every ppo.log_every steps) "
        "have their status and error in rollouts.parquet."
    )
