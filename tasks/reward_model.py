"""Reward-model task: validated annotations -> rm_data -> LoRA SFT -> held-out evaluation -> MLflow registry.

The adapter folder is logged as an MLflow-3 LoggedModel (``tracking.log_adapter_model``; never
``mlflow.transformers.log_model`` for PEFT), registered as ``reward_model.registered_name`` with alias ``candidate``,
and promoted to ``champion`` when its ``reward_model.promote_metric`` beats the current champion's. Training resumes
from its own checkpoints (keyed by config, data and base), so the task has no Prefect retries; ``--refresh
reward_model``
clears them and retrains.
"""

from __future__ import annotations

import math
from pathlib import Path

from prefect import task

from t2g_core.config import RewardModelConfig, WorkspaceConfig
from tasks import tracking
from tasks.caching import clear_if_forced, content_digest, stage_task_options

METRIC_TAG = "t2g.metric."


def _finite(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def build_data(
    feedback: dict,
    annotations: dict,
    spans: dict | None,
    base_model: str,
    cfg: RewardModelConfig,
    workspace: WorkspaceConfig,
):
    """rm_data artifact (keyed by config, inputs and the tokenizer of the base) and its build stats."""
    from transformers import AutoTokenizer

    from t2g_core.reward_model.data import build_rm_data
    from t2g_core.store import artifact_key, read_artifact
    from t2g_core.workspace import Workspace

    store = Workspace.at(workspace.root).store
    inputs = {
        "feedback": feedback["sha256"],
        "annotations": annotations["sha256"],
        "base": content_digest(base_model) or base_model,
        **({"spans": spans["sha256"]} if spans else {}),
    }
    data_cfg = cfg.model_dump(include={"max_prompt_tokens", "max_target_tokens", "val_fraction"})
    key = artifact_key("rm_data", data_cfg, inputs)
    found = store.find("rm_data", key)
    if found is not None:
        return found, {}
    df, stats = build_rm_data(
        read_artifact(feedback["path"], "feedback"),
        read_artifact(annotations["path"], "annotations"),
        AutoTokenizer.from_pretrained(base_model),
        cfg,
        spans_df=read_artifact(spans["path"], "spans") if spans else None,
    )
    if stats.n_train == 0:  # say why, rather than letting the trainer fail on an empty split
        raise ValueError(
            f"rm_data: no training rows from {stats.n_items} items ({stats.as_metrics()}); "
            "raise reward_model.max_target_tokens / max_prompt_tokens or check the annotations"
        )
    return store.write(
        "rm_data", key, df, "rm_data", extra={"stats": stats.as_metrics(), "skipped_ids": stats.skipped_ids[:200]}
    ), stats.as_metrics()


def promote_if_better(name: str, version: str, metric: str, value: float) -> bool:
    """Tag the version with its metric; move alias ``champion`` to it when it beats the champion (or none exists)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    client.set_model_version_tag(name, version, METRIC_TAG + metric, str(value))
    try:
        champion = client.get_model_version_by_alias(name, "champion")
        best = float(champion.tags.get(METRIC_TAG + metric, "-inf"))
    except MlflowException:
        champion, best = None, -math.inf
    if champion is None or value > best:
        client.set_registered_model_alias(name, "champion", version)
        return True
    return False


def download_by_alias(
    alias: str, workspace: WorkspaceConfig, name: str = "text2grad-reward-model", dst: str | Path | None = None
) -> str:
    """Local folder of the registered adapter ``name@alias`` (loadable with ``RewardModelScorer``)."""
    import mlflow

    tracking.configure(workspace)
    return mlflow.artifacts.download_artifacts(f"models:/{name}@{alias}", dst_path=str(dst) if dst else None)


def load_scorer_by_alias(
    alias: str, workspace: WorkspaceConfig, cfg: RewardModelConfig | None = None, device: str | None = None
):
    from t2g_core.reward_model.scoring import RewardModelScorer

    cfg = cfg or RewardModelConfig()
    return RewardModelScorer(download_by_alias(alias, workspace, cfg.registered_name), cfg, device=device)


@task(name="reward-model", **stage_task_options(24 * 3600))
def train_reward_model(
    feedback: dict,
    annotations: dict,
    validation: dict | None,
    models: dict,
    cfg: RewardModelConfig,
    workspace: WorkspaceConfig,
    spans: dict | None = None,
) -> dict:
    """Returns {adapter_dir, rm_data, version, champion, metrics, report}."""
    from t2g_core.reward_model.evaluate import evaluate_adapter, write_eval_report
    from t2g_core.reward_model.train import train_rm
    from t2g_core.store import artifact_key, read_artifact
    from t2g_core.workspace import Workspace

    base = str(models.get("reward_model_base") or models["base"])
    data_ref, data_stats = build_data(feedback, annotations, spans, base, cfg, workspace)
    rm_df = read_artifact(data_ref, "rm_data")
    run_dir = (
        Workspace.at(workspace.root).checkpoints
        / "reward_model"
        / artifact_key("reward_model", cfg, {"rm_data": data_ref.sha256, "base": content_digest(base) or base})
    )
    clear_if_forced(run_dir)  # --refresh reward_model: retrain rather than return the finished run in run_dir
    params = {
        **cfg.model_dump(mode="json"),
        "base_model": base,
        "rm_data_sha256": data_ref.sha256,
        "validation": (validation or {}).get("status"),
    }
    with tracking.stage_run("reward_model", params, workspace):
        tracking.log_dataset(annotations, "annotations", "annotation")
        tracking.log_dataset(data_ref, "rm_data", "training")
        tracking.log_metrics({f"rm_data.{k}": v for k, v in data_stats.items()})
        result = train_rm(cfg, base, rm_df, run_dir, tracker=tracking.MlflowTracker(), progress=False)
        report = evaluate_adapter(result.adapter_dir, rm_df, read_artifact(feedback["path"], "feedback"), cfg)
        paths = write_eval_report(report, run_dir / "eval")
        metrics = _finite(report.metrics)
        tracking.log_metrics(
            {f"rm_eval.{k}": v for k, v in metrics.items()} | {"rm_train.seconds": result.train_seconds}
        )
        tracking.log_artifact(run_dir / "eval", "eval")
        version = tracking.log_adapter_model(
            result.adapter_dir, cfg.registered_name, params, metrics, alias="candidate"
        )
        champion = promote_if_better(
            cfg.registered_name, version, cfg.promote_metric, metrics.get(cfg.promote_metric, -math.inf)
        )
    return {
        "adapter_dir": str(result.adapter_dir),
        "rm_data": data_ref.to_dict(),
        "version": version,
        "champion": champion,
        "metrics": metrics,
        "report": str(paths["markdown"]),
        "global_step": result.global_step,
    }
