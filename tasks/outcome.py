"""The outcome where people look: on the pipeline's own Prefect flow run and on its MLflow parent run.

``publish_outcome`` (a task of the root flow, so its artifact and log line belong to the run people open) reads the
evaluation (``t2g_core.evaluation.outcome``) and the registry, then writes:

- a markdown artifact ``text2grad-outcome`` on the flow run: what was learnt (the primary metric before and after,
  the verdict, the promotion), one row per stage group with its Prefect run, state and last progress report, one row
  per stage output with its MLflow run, the comparison table, and where the heatmaps and reports are;
- one log line with the outcome (the last line of the run's log before "Finished");
- on the MLflow parent run: the headline metrics (primary metric before and after, its interval, the reward model's
  held-out quality), the verdict, promotion and policy version as tags, and the same summary as its description.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task

from t2g_core.config import WorkspaceConfig
from t2g_core.datasets import dataset_name
from t2g_core.evaluation.outcome import Outcome, outcome
from t2g_core.evaluation.report import comparison_table
from t2g_core.stages.registry import ORDER, typed_outputs
from t2g_core.store import ArtifactRef
from t2g_mlflow import runs
from t2g_mlflow.registry import alias_version
from t2g_mlflow.tags import POLICY_VERSION_TAG, PROMOTED_TAG, VERDICT_TAG
from tasks.links import flow_run_url, prefect_ui_url, root_flow_run_id
from tasks.pipeline import flow_run_tree
from tasks.ppo import POLICY_MODEL

ARTIFACT_KEY = "text2grad-outcome"
NO_PREFECT_UI = (
    "The Prefect runs are named by id: this run used a temporary Prefect API server, which has no UI and ended with "
    "the command (`make up` starts a persistent one whose UI keeps them)."
)
RM_HEADLINE = ("truth_poor_char_f1", "truth_recall_invented", "span_f1")  # the reward model's, when measured


def _summary(outputs: dict[str, Any]) -> dict | None:
    """The evaluation's summary, or None when there is none (or it holds no policies to compare)."""
    evaluation = outputs.get("evaluate")
    path = Path(evaluation.summary) if evaluation is not None else None
    summary = json.loads(path.read_text(encoding="utf-8")) if path is not None and path.is_file() else None
    return summary if isinstance(summary, dict) and "policies" in summary else None


def _promotion(policy: Any) -> tuple[str, bool]:
    """(``policy version 2: promoted to champion``, promoted) from the registry's champion alias (a version left out
    names the champion it did not beat)."""
    version = getattr(policy, "version", None)
    if not version:
        return "the policy was not registered", False
    champion = alias_version(POLICY_MODEL, "champion")
    promoted = champion == str(version)
    said = "promoted to champion" if promoted else f"not promoted (the champion is version {champion})"
    return f"{POLICY_MODEL} version {version}: {said if champion else 'not promoted (no champion yet)'}", promoted


def _stage_rows(flow_run_id: str) -> list[str]:
    """``| group | run | state | progress |`` for every subflow run of ``flow_run_id``, in start order."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterType, FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        tree = [i for i in flow_run_tree(client, flow_run_id) if str(i) != str(flow_run_id)]
        if not tree:
            return []
        subflows = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=tree)))
        progress = client.read_artifacts(
            artifact_filter=ArtifactFilter(type=ArtifactFilterType(any_=["progress"])),
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=tree)),
        )
        names = {f.id: f.name for f in client.read_flows()}
    rows = []
    for fr in sorted(subflows, key=lambda r: r.start_time or r.created):
        url = flow_run_url(fr.id)
        run = f"[{fr.name}]({url})" if url else f"`{fr.id}`"
        notes = "; ".join(a.description or "" for a in progress if a.flow_run_id == fr.id and a.description)
        rows.append(f"| {names.get(fr.flow_id, '?')} | {run} | {fr.state_name} | {notes or '–'} |")
    return rows


def _output_rows(outputs: dict[str, Any], workspace: WorkspaceConfig) -> list[str]:
    rows = []
    for name in ORDER:  # the stage table's
        ref = outputs.get(name)
        if ref is None:
            continue
        what = dataset_name(workspace, ref) if isinstance(ref, ArtifactRef) else ""
        what = what or ", ".join(
            f"{k} {getattr(ref, k)}" for k in ("status", "kind", "version", "steps") if getattr(ref, k, None)
        )
        rows.append(f"| {name} | {what or '–'} | {runs.run_link(ref.run_id, workspace, name)} |")
    return rows


def _where(outputs: dict[str, Any]) -> list[str]:
    lines = []
    policy, evaluation = outputs.get("ppo"), outputs.get("evaluate")
    index = Path(policy.run_dir) / "heatmaps" / "index.html" if policy is not None else None
    if index is not None and index.is_file():
        lines.append(f"- token-reward heatmaps: `{index}` (MLflow: artifacts `heatmaps/index.html` of the ppo run)")
    if evaluation is not None:
        lines.append(f"- evaluation report: `{evaluation.report}`")
    return lines


def outcome_markdown(result: Outcome, promotion: str, outputs: dict, stage_rows: list[str], workspace) -> str:
    summary = _summary(outputs)
    md = [f"# {result.headline()}", "", f"**{promotion}**", ""]
    reward = getattr(outputs.get("reward_model"), "metrics", None) or {}
    shown = [f"{k} {reward[k]:.3f}" for k in RM_HEADLINE if isinstance(reward.get(k), (int, float))]
    if shown:
        md += [f"Reward model (held-out): {', '.join(shown)}.", ""]
    if stage_rows:
        md += ["## Stage groups", "", *([] if prefect_ui_url() else [NO_PREFECT_UI, ""])]
        md += ["| flow | Prefect run | state | progress |", "|---|---|---|---|", *stage_rows, ""]
    md += ["## Stage outputs", "", "| output | what | MLflow run |", "|---|---|---|"]
    md += [*_output_rows(outputs, workspace), ""]
    if summary is not None:
        md += ["## What was learnt (held-out prompts; baseline = the policy before PPO)", "", comparison_table(summary)]
    where = _where(outputs)
    return "\n".join(md + (["", "## Where to look", "", *where] if where else [])) + "\n"


@task(name="publish-outcome", timeout_seconds=600)
def publish_outcome(outputs: dict[str, Any], workspace: WorkspaceConfig) -> str:
    """The outcome as a markdown artifact and a log line of this flow run and on its MLflow parent run; returns the
    log line."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.runtime import flow_run

    outputs = typed_outputs(outputs)
    result = outcome(_summary(outputs))
    promotion, promoted = _promotion(outputs.get("ppo"))
    markdown = outcome_markdown(result, promotion, outputs, _stage_rows(str(flow_run.id)), workspace)
    create_markdown_artifact(key=ARTIFACT_KEY, markdown=markdown, description=f"{result.headline()}; {promotion}")
    reward = getattr(outputs.get("reward_model"), "metrics", None) or {}
    metrics = result.metrics() | {f"rm_{k}": float(reward[k]) for k in RM_HEADLINE if k in reward}
    tags = {VERDICT_TAG: result.verdict, PROMOTED_TAG: "champion" if promoted else "not promoted"}
    if getattr(outputs.get("ppo"), "version", None):
        tags[POLICY_VERSION_TAG] = str(outputs["ppo"].version)
    runs.record_outcome(workspace, metrics, tags, markdown, root_flow_run_id())
    line = f"outcome: {result.headline()}; {promotion}"
    get_run_logger().info(line)
    return line
