"""When the reward source fails, PPO stops: a run rewarded by failures must not finish as a trained policy.

A failed critique (no answer, an HTTP error, a timeout, an answer that does not parse) gives its rollout
``ppo.parse_failure_reward`` and the step goes on: a few failures are noise. But when the share of failed rollouts
(the step metric ``parse/failure_rate``, over every process) stays above ``ppo.max_reward_failure_rate`` for
``ppo.reward_failure_patience`` consecutive steps, PPO is training on the failure reward alone (an endpoint that is
down, a server that answers garbage), so :func:`check_reward_source` raises :class:`RewardSourceFailed`: the stage
fails, no adapter is published as the result, and ``rollouts.parquet`` holds each recorded rollout's status and
error. The streak is read from the metric history, so a resumed run counts the steps before its checkpoint too.
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
    if cfg.max_reward_failure_rate >= 1 or failure_streak(history, cfg.max_reward_failure_rate) < (
        cfg.reward_failure_patience
    ):
        return
    rates = ", ".join(f"{h[RATE]:.0%}" for h in history[-cfg.reward_failure_patience :])
    common = Counter(e.splitlines()[0][:200] if e else "no error text" for e in errors).most_common(3)
    seen = "; ".join(f"{n} x {e}" for e, n in common) or "no error text"
    raise RewardSourceFailed(
        f"PPO stopped at step {history[-1].get('step')}: the reward source ({cfg.reward_source}) failed on {rates} "
        f"of the rollouts of the last {cfg.reward_failure_patience} steps (ppo.max_reward_failure_rate = "
        f"{cfg.max_reward_failure_rate}). Last errors: {seen}. The recorded rollouts (every ppo.log_every steps) "
        "have their status and error in rollouts.parquet."
    )
