"""The holdout split as the stages that train on the feedback see it: the rows PPO trains on, never a held-out one."""

from __future__ import annotations

from t2g_core.config.stages import PolicySamplesSettings, WarmupSettings
from t2g_core.feedback import split_prompts
from t2g_core.stages.io import read
from t2g_core.stages.refs import ArtifactRef


def training_rows(feedback: ArtifactRef, settings: WarmupSettings | PolicySamplesSettings):
    """The feedback rows PPO trains on (the held-out ones removed by ``settings.holdout``'s split)."""
    return split_prompts(read(feedback, "feedback"), settings.holdout)[0]
