"""Align task: feedback + annotations artifacts -> spans artifact (quoted spans placed in each response).

Pure work is :func:`t2g_core.spans.align_frame`; this adapter reads the inputs, writes the ``spans`` artifact, and
logs the alignment metrics (unmatched-span rate, match-type mix, labelled fraction of the policy's tokens when the
policy folder is known) to the stage's MLflow run.
"""

from __future__ import annotations

from prefect import task

from t2g_core.config import AlignConfig, WorkspaceConfig
from tasks import tracking
from tasks.caching import stage_task_options


def _policy_labels(
    spans_df, responses: dict[str, str], models: dict | None, cfg: AlignConfig
) -> list[list[float]] | None:
    """Token labels under the policy's tokenizer (for the labelled-token fraction), when a policy folder exists."""
    policy = (models or {}).get("policy")
    if not policy:
        return None
    from transformers import AutoTokenizer

    from t2g_core.spans import spans_by_item, token_labels_batch

    tok = AutoTokenizer.from_pretrained(policy)
    by_item, ids = spans_by_item(spans_df), list(responses)
    return token_labels_batch([responses[i] for i in ids], [by_item.get(i, []) for i in ids], tok, cfg)


@task(name="align", **stage_task_options(1800))
def align(feedback: dict, annotations: dict, models: dict | None, cfg: AlignConfig, workspace: WorkspaceConfig) -> dict:
    """Place every quoted span; returns the spans artifact reference plus its metrics."""
    from t2g_core.alignment import alignment_stats
    from t2g_core.spans import align_frame
    from t2g_core.store import artifact_key, read_artifact
    from t2g_core.workspace import Workspace

    fb = read_artifact(feedback["path"], "feedback")
    spans = align_frame(
        fb, read_artifact(annotations["path"], "annotations"), cfg, annotations_file=annotations["path"]
    )
    responses = dict(zip(fb["id"], fb["response"], strict=True))
    metrics = alignment_stats(spans, responses, _policy_labels(spans, responses, models, cfg))
    inputs = {
        "feedback": feedback["sha256"],
        "annotations": annotations["sha256"],
        "policy": str((models or {}).get("policy")),
    }
    ref = Workspace.at(workspace.root).store.write(
        "spans", artifact_key("spans", cfg, inputs), spans, "spans", extra={"metrics": metrics}
    )
    with tracking.stage_run("align", cfg, workspace):
        tracking.log_dataset(annotations, "annotations", "annotation")
        tracking.log_output(ref, "spans")
        tracking.log_metrics({f"align.{k}": v for k, v in metrics.items()})
    return {**ref.to_dict(), "metrics": metrics}


align_spans = align  # the name used in the span-core brief
