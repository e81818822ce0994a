"""Where each stage group runs: inline in the orchestrating flow, or as a deployment on a work pool (a GPU pool)."""

from __future__ import annotations

from pydantic import Field

from t2g_core.config.base import StageConfig

POOL = (
    "Work pool that runs {what} (None = inline in the text2grad flow). The pool needs a deployment of the stage "
    "group's flow: `python deployments/serve.py --pool NAME` or the `*-gpu` deployments of `deployments/prefect.yaml`."
)


class PlacementConfig(StageConfig):
    annotate: str | None = Field(None, description=POOL.format(what="annotation"))
    align_and_validate: str | None = Field(None, description=POOL.format(what="alignment and validation"))
    train_reward_model: str | None = Field(None, description=POOL.format(what="reward-model training, e.g. `t2g-gpu`"))
    warm_up_policy: str | None = Field(None, description=POOL.format(what="the policy's supervised warm-up"))
    sample_policy: str | None = Field(None, description=POOL.format(what="sampling the policy for the reward model"))
    train_policy: str | None = Field(None, description=POOL.format(what="PPO, e.g. `t2g-gpu`"))
    evaluate: str | None = Field(None, description=POOL.format(what="policy evaluation, e.g. `t2g-gpu`"))
