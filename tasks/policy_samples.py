"""Policy-samples task: the policy PPO starts from, sampled on training prompts and labelled by the annotator
(``policy_samples.enabled``), for the reward model to train on.

The annotator's answers are cached in the workspace (as the annotation stage's are), so a retry pays only for what
was never answered; the LLM annotator's variant retries like the annotation task's.
"""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.stages import PolicySamplesSettings
from t2g_core.stages import policy_samples
from t2g_core.stages.refs import ArtifactRef, ModelsRef, PolicySamplesRef
from t2g_env import api_key
from tasks.caching import stage_task_options
from tasks.stage import stage


def _sample(
    feedback: ArtifactRef, models: ModelsRef, settings: PolicySamplesSettings, workspace: WorkspaceConfig
) -> PolicySamplesRef:
    """The policy's responses to training prompts and the annotator's rows for them."""
    with stage(_sample, "policy_samples", workspace, feedback=feedback, models=models, settings=settings) as ctx:
        return ctx.produced(policy_samples.sample(feedback, models, settings, ctx, api_key=api_key(settings)))


sample_critic = task(name="policy_samples", **stage_task_options())(_sample)
sample_llm = task(name="policy_samples", **stage_task_options(retries=3))(_sample)


def sample_task(settings: PolicySamplesSettings):
    """The task variant for the configured annotator: retries for the LLM annotator only."""
    return sample_llm if settings.annotate.annotator == "llm" else sample_critic
