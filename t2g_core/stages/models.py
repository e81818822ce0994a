"""Models stage: the policy before PPO and the reward-model base, built locally (tiny) or named (Hub id / folder)."""

from __future__ import annotations

from t2g_core.config.stages import ModelsSettings
from t2g_core.stages.context import StageContext
from t2g_core.stages.io import read
from t2g_core.stages.refs import ArtifactRef, ModelsRef


def build(feedback: ArtifactRef, settings: ModelsSettings, ctx: StageContext) -> ModelsRef:
    """Build (once per key) the tiny base and warm-started policy for the feedback's task; named models pass through."""
    from t2g_core.models.demo_build import ensure_demo_models

    df = read(feedback, "feedback")
    ctx.tracker.log_input(feedback, "feedback", "training")
    with ctx.own_folder("models") as folder:
        built = ensure_demo_models(
            folder, settings.models, df, progress=ctx.on_progress, log=ctx.log, rebuild=ctx.force
        )
    build_info = built.policy.parent / "build.json"
    if build_info.exists():
        ctx.tracker.log_artifact(build_info)
    return ModelsRef.of(built.base, built.policy)
