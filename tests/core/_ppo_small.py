"""A PPO run small enough for a test: the oracle critic, 2 steps of 4 rollouts, 8 new tokens, and a checkpoint,
an evaluation and a log at every step."""

from __future__ import annotations

from t2g_core.config import PPOConfig

SMALL = PPOConfig(
    reward_source="oracle",
    steps=2,
    batch_size=4,
    minibatches=2,
    ppo_epochs=1,
    sampling={"max_new_tokens": 8},
    value_model="head",
    save_every=1,
    eval_every=1,
    log_every=1,
)
