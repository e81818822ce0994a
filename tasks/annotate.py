"""Annotation task: feedback artifact -> annotations artifact (LLM, code critic or reference critic).

Only the LLM annotator talks to the outside world, so only it gets Prefect retries (the answer cache makes a retry
cost nothing for items already answered). The API key comes from a Prefect Secret block (``api_key_secret``) or the
environment variable named in config; it is handed to t2g_core and never logged or stored.
"""

from __future__ import annotations

import os

from prefect import task

from t2g_core.config import AnnotateConfig, WorkspaceConfig
from tasks import tracking
from tasks.caching import stage_task_options


def _api_key(cfg: AnnotateConfig) -> str | None:
    if cfg.annotator != "llm":
        return None
    if cfg.api_key_secret:
        from prefect.blocks.system import Secret

        return Secret.load(cfg.api_key_secret).get()
    return os.environ.get(cfg.api_key_env)


def _annotate(feedback: dict, cfg: AnnotateConfig, workspace: WorkspaceConfig, previous: dict | None = None) -> dict:
    from t2g_core.annotators import annotate
    from t2g_core.store import artifact_key, read_artifact
    from t2g_core.workspace import Workspace

    ws = Workspace.at(workspace.root)
    prev = read_artifact(previous["path"], "annotations") if previous else None
    run = annotate(
        read_artifact(feedback["path"], "feedback"),
        cfg,
        api_key=_api_key(cfg),
        cache_dir=ws.root / "cache" / "annotate",
        progress=False,
        previous=prev,
    )
    key = artifact_key(
        "annotations", cfg, {"feedback": feedback["sha256"], **({"previous": previous["sha256"]} if previous else {})}
    )
    ref = ws.store.write("annotations", key, run.frame, "annotations", extra={"stats": run.stats})
    with tracking.stage_run("annotate", cfg, workspace):  # cfg names the key's env var / secret, never the key
        tracking.log_dataset(feedback, "feedback", "annotation")
        tracking.log_output(ref, "annotations")
        tracking.log_metrics({f"annotate.{k}": v for k, v in _flat_stats(run.stats).items()})
    return {**ref.to_dict(), "stats": run.stats}


def _flat_stats(stats: dict) -> dict[str, float]:
    flat = {f"status.{k}": float(v) for k, v in stats["status_counts"].items()}
    flat.update(
        {
            k: float(stats[k])
            for k in ("n_items", "prompt_tokens", "completion_tokens", "cost", "requests", "cache_hits")
        }
    )
    return flat


annotate_critic = task(name="annotate", **stage_task_options(3600))(_annotate)
annotate_llm = task(name="annotate-llm", **stage_task_options(6 * 3600, retries=3))(_annotate)


def annotate_stage(
    feedback: dict, cfg: AnnotateConfig, workspace: WorkspaceConfig, previous: dict | None = None
) -> dict:
    """Pick the task variant: retries for the LLM annotator only."""
    fn = annotate_llm if cfg.annotator == "llm" else annotate_critic
    return fn(feedback, cfg, workspace, previous)
