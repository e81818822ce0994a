"""MLflow lineage from Prefect runs: one parent run per flow run (not duplicated by a Prefect retry), nested stage
runs tagged with Prefect ids, datasets with content digests, and `t2g lineage`'s walk from a registered adapter
back to the feedback."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from prefect import flow, task

from t2g_core.config import WorkspaceConfig
from t2g_core.store import ArtifactStore, artifact_key

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.slow]  # the harness serves a Prefect API
FAILS: dict[str, int] = {}


def _feedback(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": [f"i{i}" for i in range(n)],
            "task": "qa",
            "prompt": "p",
            "response": "r",
            "critique": None,
            "reference": "r",
            "tests": None,
            "entry_point": None,
            "meta": None,
        }
    )


@task
def make_feedback(ws: dict) -> dict:
    from t2g_mlflow import datasets
    from tasks.links import stage_run

    cfg = WorkspaceConfig(**ws)
    ref = ArtifactStore(Path(cfg.root) / "artifacts").write(
        "feedback", artifact_key("feedback", {"n": 4}), _feedback(4), "feedback"
    )
    with stage_run("feedback", {"n": 4}, cfg):
        datasets.log_output(ref, "feedback")
    return ref.to_dict()


@task
def annotate(feedback: dict, ws: dict) -> dict:
    from t2g_mlflow import datasets
    from tasks.links import stage_run

    cfg = WorkspaceConfig(**ws)
    df = pd.DataFrame(
        {
            "id": ["i0"],
            "annotator": "reference",
            "critique": "c",
            "good_spans": [["r"]],
            "poor_spans": [[]],
            "reasoning": None,
            "status": "ok",
            "error": None,
            "raw": None,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "latency_s": 0.0,
        }
    )
    ref = ArtifactStore(Path(cfg.root) / "artifacts").write(
        "annotations", artifact_key("ann", None, {"f": feedback["sha256"]}), df, "annotations"
    )
    with stage_run("annotate", {"annotator": "reference"}, cfg):
        datasets.log_dataset(feedback, "feedback", "annotation")
        datasets.log_output(ref, "annotations")
    return ref.to_dict()


@task
def train(annotations: dict, ws: dict, adapter_dir: str) -> str:
    from t2g_mlflow import datasets, registry, runs, tracker
    from tasks.links import stage_run

    cfg = WorkspaceConfig(**ws)
    with stage_run("reward_model", {"lr": 0.1}, cfg):
        FAILS[cfg.root] = FAILS.get(cfg.root, 0) + 1
        if FAILS[cfg.root] == 1:
            raise RuntimeError("first attempt fails")
        datasets.log_dataset(annotations, "annotations", "training")
        runs.log_metrics({"loss": 0.5}, step=1)
        tracker.MlflowTracker().log_metrics({"loss": 0.25}, step=2)
        return registry.log_adapter_model(adapter_dir, "t2g-test-rm", {"r": 8}, {"acc": 0.75}, alias="champion")


@flow(name="lineage-pipeline", retries=1, retry_delay_seconds=0)
def pipeline(ws: dict, adapter_dir: str) -> str:
    fb = make_feedback(ws)
    return train(annotate(fb, ws), ws, adapter_dir)


@pytest.mark.slow
def test_parent_run_is_reused_on_retry_and_lineage_walks_back_to_feedback(tmp_path):
    import mlflow

    from t2g_mlflow.experiment import tracking_uri
    from t2g_mlflow.lineage import lineage_chain

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (tmp_path / "ws").mkdir()
    ws = {"root": str(tmp_path / "ws"), "mlflow_tracking_uri": f"sqlite:///{tmp_path / 'ws' / 'mlflow.db'}"}
    state = pipeline(ws, str(adapter), return_state=True)
    assert state.is_completed()
    flow_run_id = str(state.state_details.flow_run_id)

    client = mlflow.MlflowClient(tracking_uri(WorkspaceConfig(**ws)))
    exp = client.get_experiment_by_name("text2grad")
    assert exp.artifact_location.startswith((tmp_path / "ws").as_uri())
    parents = client.search_runs([exp.experiment_id], "tags.`t2g.role` = 'pipeline'")
    assert [p.data.tags["prefect.flow_run_id"] for p in parents] == [flow_run_id]  # one, despite the flow retry
    stages = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'")
    rm_runs = sorted((r for r in stages if r.data.tags["t2g.stage"] == "reward_model"), key=lambda r: r.info.start_time)
    assert [r.info.status for r in rm_runs] == ["FAILED", "FINISHED"]
    assert all(
        r.data.tags["prefect.flow_run_id"] == flow_run_id and r.data.tags.get("prefect.task_run_id") for r in stages
    )
    assert client.get_metric_history(rm_runs[-1].info.run_id, "loss")[-1].value == 0.25
    version = client.get_model_version_by_alias("t2g-test-rm", "champion")  # its logged model: the Prefect ids too
    assert client.get_logged_model(version.source.removeprefix("models:/")).tags["prefect.flow_run_id"] == flow_run_id

    chain = lineage_chain("t2g-test-rm", "champion", tracking_uri(WorkspaceConfig(**ws)))
    text = "\n".join(line for _, line in chain)
    assert "[reward_model]" in text and "[annotate]" in text and "[feedback]" in text
    assert text.index("[reward_model]") < text.index("[annotate]") < text.index("[feedback]")
    feedback_sha = next(
        d.dataset.digest for r in stages if r.data.tags["t2g.stage"] == "feedback" for d in r.inputs.dataset_inputs
    )
    assert feedback_sha in text


def test_lineage_follows_only_producers_that_finished_before_the_consumer(tmp_path):
    """A later run that outputs the same content (a re-annotation that changed nothing) is not the producer of what
    an earlier consumer read: before, lineage took the newest run with that digest and ended at it."""
    import time

    import mlflow

    from t2g_mlflow import datasets, experiment, registry, runs
    from t2g_mlflow.lineage import lineage_chain

    (tmp_path / "ws").mkdir()
    ws = WorkspaceConfig(root=str(tmp_path / "ws"), mlflow_tracking_uri=f"sqlite:///{tmp_path / 'ws' / 'mlflow.db'}")
    ref = ArtifactStore(Path(ws.root) / "artifacts").write("feedback", "k", _feedback(3), "feedback")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with runs.stage_run("annotate", {}, ws) as first:
        datasets.log_output(ref, "annotations")
    time.sleep(0.05)
    with runs.stage_run("reward_model", {}, ws):
        datasets.log_dataset(ref, "annotations", "training")  # logged without its producer (older runs did)
        version = registry.log_adapter_model(adapter, "lineage-time-test", alias="champion")
    time.sleep(0.05)
    with runs.stage_run("merge_annotations", {}, ws) as later:  # a re-annotation that changed nothing, later
        datasets.log_output(ref, "annotations")
    chain = "\n".join(line for _, line in lineage_chain("lineage-time-test", version, experiment.tracking_uri(ws)))
    assert first.info.run_id in chain and later.info.run_id not in chain
    assert mlflow.get_run(later.info.run_id).info.status == "FINISHED"


def test_stage_runs_carry_no_placeholder_urls(tmp_path, monkeypatch):
    """Without a Prefect UI URL (ephemeral API) Prefect's flow-run URL is "None/flow-runs/...": not a tag."""
    from prefect import flow

    from tasks.links import prefect_tags

    monkeypatch.delenv("PREFECT_UI_URL", raising=False)
    tags = flow(name="tag-test")(prefect_tags)()
    assert tags["prefect.flow_run_id"] and not [v for v in tags.values() if v.startswith("None")]


@flow(name="outcome-test")
def outcome_flow(ws: dict) -> tuple[str | None, str | None]:
    from t2g_mlflow import runs
    from tasks.links import root_flow_run_id, stage_run

    cfg = WorkspaceConfig(**ws)
    with stage_run("feedback", {}, cfg):  # the first stage run creates the pipeline's parent run
        pass
    noted = runs.record_outcome(cfg, {"fact_error": 0.1}, {"t2g.verdict": "better"}, "the outcome", root_flow_run_id())
    return noted, runs.link_pipeline_outputs({}, cfg, root_flow_run_id())


def test_the_outcome_and_the_outputs_go_to_the_parent_run_of_the_root_flow_run(tmp_path):
    """The Prefect glue hands t2g_mlflow the root flow run (``tasks.links.root_flow_run_id``): the outcome and the
    outputs' record land on the parent run the stage runs are nested under; outside a flow there is none."""
    import mlflow

    from t2g_mlflow import runs
    from t2g_mlflow.experiment import tracking_uri

    (tmp_path / "ws").mkdir()
    ws = {"root": str(tmp_path / "ws"), "mlflow_tracking_uri": f"sqlite:///{tmp_path / 'ws' / 'mlflow.db'}"}
    noted, linked = outcome_flow(ws)
    parent = mlflow.MlflowClient(tracking_uri(WorkspaceConfig(**ws))).get_run(noted)
    assert (
        noted == linked and parent.data.tags["t2g.role"] == "pipeline" and parent.data.tags["t2g.verdict"] == "better"
    )
    assert parent.data.metrics["fact_error"] == 0.1 and parent.data.tags["mlflow.note.content"] == "the outcome"
    assert runs.record_outcome(WorkspaceConfig(**ws), {"x": 1.0}, {}, "", None) is None


@flow(name="stage-group-test")
def stage_group() -> None:
    return None


@flow(name="links-test")
def links_flow() -> str:
    from prefect.runtime import flow_run

    stage_group()
    return str(flow_run.id)


@pytest.mark.parametrize("ui", ["http://prefect.example:4200", ""])
def test_the_outcome_links_prefect_runs_only_on_a_server_that_keeps_them(ui, monkeypatch):
    """The temporary Prefect API server of `t2g run` has no UI and ends with the command: the outcome says so instead
    of linking its runs (before: links to its port, dead once the command ended); a persistent server's UI is linked,
    and the stage runs' Prefect URL tag follows the same rule."""
    from prefect.settings import PREFECT_UI_URL, temporary_settings

    from tasks.links import prefect_tags
    from tasks.outcome import _stage_rows, outcome, outcome_markdown

    with temporary_settings({PREFECT_UI_URL: ui}):
        rows = _stage_rows(links_flow())
        md = outcome_markdown(outcome(None), "promotion", {}, rows, WorkspaceConfig(root="ws"))
        tags = flow(name="tag-test")(prefect_tags)()
    assert len(rows) == 1 and ("stage-group-test" in rows[0])
    if ui:
        assert f"]({ui}/runs/flow-run/" in rows[0] and "temporary" not in md
        assert tags["prefect.flow_run_url"].startswith(f"{ui}/runs/flow-run/")
    else:
        assert "http" not in md and "temporary Prefect API server" in md and "prefect.flow_run_url" not in tags


def test_the_temporary_prefect_server_says_it_has_no_ui(monkeypatch):
    """`t2g run` without a server starts a temporary one (no UI, gone with the command) and says so to Prefect."""
    import os

    from t2g_cli import runtime

    for name in ("PREFECT_API_URL", "PREFECT_UI_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(runtime.subprocess, "Popen", lambda *a, **k: type("P", (), {"poll": lambda self: None})())
    monkeypatch.setattr(runtime.atexit, "register", lambda *a: None)
    _, url, _ = runtime._spawn_temporary_prefect()
    assert os.environ["PREFECT_API_URL"] == url and os.environ["PREFECT_UI_URL"] == ""


def test_a_stage_run_names_its_input_dataset_as_everywhere_else(tmp_path):
    """The consumer run's description names a dataset version as the model descriptions and the run summary do
    (before: "input feedback (3 rows, sha256 …)" beside "feedback version 1 (3 rows)")."""
    import mlflow

    from t2g_core import datasets as versions
    from t2g_mlflow import datasets, runs
    from t2g_mlflow.tracker import MlflowTracker

    (tmp_path / "ws").mkdir()
    ws = WorkspaceConfig(root=str(tmp_path / "ws"), mlflow_tracking_uri=f"sqlite:///{tmp_path / 'ws' / 'mlflow.db'}")
    ref = ArtifactStore(Path(ws.root) / "artifacts").write("feedback", "k", _feedback(3), "feedback")
    versions.record_first_versions(ws, ref, ref)
    with runs.stage_run("feedback", {}, ws) as producer:
        datasets.log_output(ref, "feedback")
    with runs.stage_run("annotate", {}, ws) as consumer:
        MlflowTracker(workspace=ws).log_input(ref.model_copy(update={"run_id": producer.info.run_id}), "feedback", "x")
    note = mlflow.MlflowClient().get_run(consumer.info.run_id).data.tags["mlflow.note.content"]
    assert f"feedback version 1 (3 rows, sha256 {ref.sha256[:12]})" in note and "produced by run [feedback]" in note
