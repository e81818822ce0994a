"""The annotator's labels of a frame of responses as an artifact: the step of the annotation stage (on the feedback)
and of the policy-samples stage (on the policy's own responses)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from t2g_core.config.stages import AnnotateSettings
from t2g_core.stages.context import StageContext
from t2g_core.stages.preflight import check
from t2g_core.stages.refs import ArtifactRef


def label(
    frame: pd.DataFrame,
    settings: AnnotateSettings,
    ctx: StageContext,
    name: str,
    metrics_prefix: str,
    *,
    api_key: str | None = None,
    previous: pd.DataFrame | None = None,
    cache_dir: str | Path | None = None,
) -> ArtifactRef:
    """The annotator's rows for every item of ``frame`` as the artifact ``name``: preflight first, answers cached
    under ``cache_dir``, statistics as ``<metrics_prefix>.*``, every row written before the failure limit is checked."""
    from t2g_core.annotators import annotate as run_annotate

    cfg = settings.annotate
    check(frame, cfg, has_key=api_key is not None)  # before any request or item: one message if the rows do not fit
    run = run_annotate(
        frame,
        cfg,
        api_key=api_key,
        progress=ctx.progress,
        previous=previous,
        cache_dir=cache_dir or ctx.workspace.root / "cache" / "annotate",
        log=ctx.log,
    )
    ref = ctx.out.artifact(name, run.frame, "annotations", extra={"stats": run.stats})
    ctx.tracker.log_output(ref, name)
    ctx.tracker.log_metrics({f"{metrics_prefix}.{k}": v for k, v in flat_stats(run.stats).items()})
    if run.stats.get("sandbox_isolation"):
        ctx.log(f"code sandbox isolation: {run.stats['sandbox_isolation']}")
        ctx.tracker.log_params({f"{metrics_prefix}.sandbox_backend": run.stats["sandbox_isolation"]})
    counts = ", ".join(f"{k} {v}" for k, v in run.stats["status_counts"].items() if v)
    ctx.log(f"{len(run.frame)} items annotated ({counts})")
    check_failure_rate(ref, run.stats, cfg.max_failure_rate)
    return ref


class TooManyFailures(RuntimeError):
    """More items than ``annotate.max_failure_rate`` failed; every row was written first (``ref``)."""

    def __init__(self, message: str, ref: ArtifactRef):
        super().__init__(message)
        self.ref = ref


def check_failure_rate(ref: ArtifactRef, stats: dict, limit: float) -> None:
    """Raise :class:`TooManyFailures` naming the statuses when the share of items not ``ok`` exceeds ``limit``."""
    counts, n = stats["status_counts"], max(stats["n_items"], 1)
    failed = n - counts.get("ok", 0) if stats["n_items"] else 0
    if failed / n > limit:
        detail = ", ".join(f"{k}: {v}" for k, v in counts.items() if v and k != "ok")
        reasons = "".join(f"\n  {status}, e.g. {why}" for status, why in stats.get("first_errors", {}).items())
        raise TooManyFailures(
            f"{failed} of {n} items failed ({detail}), more than annotate.max_failure_rate "
            f"{limit:g}; every row is in {ref.path}.{reasons}\nFix the cause and run again (answers already "
            "received are cached), or `t2g annotate --only-failed`.",
            ref,
        )


def flat_stats(stats: dict) -> dict[str, float]:
    flat = {f"status.{k}": float(v) for k, v in stats["status_counts"].items()}
    keys = ("n_items", "prompt_tokens", "completion_tokens", "cost", "requests", "cache_hits")
    flat.update({k: float(stats[k]) for k in keys})
    return flat
