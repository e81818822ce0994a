"""PPO task: feedback prompts + the policy before PPO (+ reward model) -> a trained LoRA policy adapter, registered.

The run folder is keyed by the stage key; a re-run after a crash resumes from the run's own latest checkpoint
(training is not retried by Prefect, it continues, and the log says from which step); ``--refresh ppo`` starts it
afresh. The adapter is registered as ``text2grad-policy`` (alias ``candidate``) with the reward-model version it was
trained against, so ``t2g lineage`` walks back from the policy; evaluation may promote it to ``champion``. The reward
model the critique loop refreshed last, the one PPO's last rewards came from, is registered once per run as a version
of the reward model (alias ``refreshed``), logged by this PPO run, with every round's audit as its metrics; the alarm
shows as the run's ``ppo-critique-loop`` progress artifact.
"""

from __future__ import annotations

from prefect import task

from t2g_core.config import WorkspaceConfig
from t2g_core.config.orchestration import Layout
from t2g_core.config.stages import PPOSettings
from t2g_core.stages import ppo
from t2g_core.stages.refs import ArtifactRef, ModelsRef, PolicyRef, RewardModelRef
from t2g_mlflow.registry import describe_version, log_adapter_model, log_model_input
from tasks.caching import stage_task_options
from tasks.stage import run_stage, stage

POLICY_MODEL = "text2grad-policy"


@task(name="ppo", **stage_task_options())
def train_policy(
    feedback: ArtifactRef,
    models: ModelsRef,
    reward_model: RewardModelRef | None,
    settings: PPOSettings,
    workspace: WorkspaceConfig,
    layout: Layout | None = None,
) -> PolicyRef:
    """PPO with the configured reward source (in ``layout``'s processes); returns the adapter, run folder and
    registered version."""

    used_rm = reward_model if settings.uses_reward_model else None
    with stage(
        train_policy, "ppo", workspace, feedback=feedback, models=models, reward_model=reward_model, settings=settings
    ) as ctx:
        inputs = {"feedback": feedback, "models": models, "reward_model": used_rm, "settings": settings}
        ref = run_stage(ppo.train, ctx, layout, workspace, **inputs)
        rm_version = used_rm.version if settings.uses_trained_reward_model and used_rm is not None else None
        if rm_version:
            log_model_input(settings.reward_model.registered_name, rm_version)
        refreshed = register_refreshed(ref, settings, rm_version)
        version = log_adapter_model(
            ref.adapter_dir, POLICY_MODEL, params=settings, metrics=ref.metrics, alias="candidate"
        )
        ctx.log(f"policy adapter registered as {POLICY_MODEL} version {version}")
        update = {"version": version, "reward_model_version": rm_version, "refreshed_reward_model_version": refreshed}
        return ctx.produced(ref.model_copy(update=update))


def register_refreshed(ref: PolicyRef, settings: PPOSettings, started_from: str | None) -> str | None:
    """Register the reward model the critique loop refreshed last (PPO's last rewards came from it) as one version of
    the reward model, logged by this run, with each round's audit (the reward model it replaced against the annotator,
    on the policy's rollouts) as ``critique_loop/*`` metrics at the round's PPO step, and a description in words.
    One version per run, not per round: a round's reward model scores a few steps and is never used again (each is
    kept in the run folder, ``critique_loop/round-NNN/tagger``). None when nothing was refreshed."""
    if not ref.reward_models:
        return None
    name, last = settings.reward_model.registered_name, ref.reward_models[-1]
    rounds = {m["step"]: {f"critique_loop/{k}": v for k, v in m["metrics"].items()} for m in ref.reward_models}
    params = {"critique_loop_rounds": len(ref.reward_models), "refreshed_from_version": started_from}
    version = log_adapter_model(
        last["folder"], name, params, alias="refreshed", model_type="span-tagger", metrics_by_step=rounds
    )
    start = f"version {started_from}" if started_from else settings.ppo.reward_model_path or "its trained reward model"
    describe_version(name, version, refreshed_description(ref, start))
    return version


AUDIT_WORDS = {  # the last round's figures a refreshed reward model's description gives, in words
    "f1": "span F1 against the annotator {:.2f}",
    "poor_f1": "poor-span F1 {:.2f}",
    "gap": "reward paid beyond the annotator's on the panel {:+.2f}",
    "gap_start": "at the warm start {:+.2f}",
}


def refreshed_description(ref: PolicyRef, start: str) -> str:
    """The refreshed reward model in words: where it started, how often it was refreshed, its last round's audit (of
    the reward model it replaced)."""
    last = ref.reward_models[-1]
    audit = [words.format(last["metrics"][k]) for k, words in AUDIT_WORDS.items() if k in last["metrics"]]
    return (
        f"Reward model refreshed {len(ref.reward_models)} times by the critique loop from {start} during a PPO run "
        f"of {ref.steps} steps ({ref.run_dir}); PPO's last rewards came from it. The last round's audit, after step "
        f"{last['step']}, of the reward model it replaced: {', '.join(audit) or 'nothing could be annotated'}. Each "
        "round's figures are metrics of this model (critique_loop/*) at the round's PPO step."
    )
