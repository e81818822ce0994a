"""End to end against real servers: `deployments/up.sh` starts `prefect server`, `mlflow server` and the serve process
on free 127.0.0.1 ports; the stage flows are deployed on a process work pool with a worker; a text2grad run is started
through the REST API exactly as the UI's Run button does, with its evaluation placed on that pool; its process is
killed during PPO and the run is retried as the UI's Retry button does; MLflow is queried for the lineage; a file
dropped in the inbox is announced by the sensor, re-annotated by the event-triggered deployment and trained on
(then=policy, set on it as in the UI); `deployments/down.sh` stops exactly the processes up.sh recorded. The API asks
for the auth string up.sh keeps in the workspace, and a run that would send a key variable to an endpoint not allowed
at serve time is refused before any request.

Runs the real stages on a tiny configuration.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from t2g_core.config.presets import merged
from tests.e2e._listener import Listener
from tests.e2e.conftest import POOL

# one set of servers for the module's tests (start-up and shutdown cost about 20 s each time), so they share a worker
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(1500),
    pytest.mark.xdist_group("e2e-servers"),
]

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}

# the kill/resume step needs PPO long enough to be killed mid-run and a page per step: set on the form over the tiny
# preset as shipped (none of them is PPO's default, so the preset leaves them)
KILLABLE_PPO = {"steps": 12, "eval_every": 1, "log_every": 1, "save_every": 1}


def _tiny_run(form: dict, **sections) -> dict:
    """The Run button's parameters: the deployment's config with ``sections`` set, sized by the shipped tiny preset."""
    return {"preset": "tiny", "config": {**form, "ppo": merged(form.get("ppo", {}), KILLABLE_PPO), **sections}}


def _flow_run_process(flow_run_id: str) -> int | None:
    """PID of the process executing ``flow_run_id`` (its environment names the flow run)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes()
        except OSError:
            continue
        if f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode() in env.split(b"\0"):
            return int(proc.name)
    return None


def _kill_during_ppo(api: httpx.Client, ws: Path, flow_run_id: str, timeout: float) -> None:
    """Wait until this run's PPO saved a checkpoint, then kill -9 the flow run's process (an OOM kill, a lost node).
    A checkpoint of an earlier PPO run in the module's shared workspace does not count (its kill came too early)."""
    latest = lambda: set((ws / "checkpoints" / "ppo").glob("*/checkpoints/latest"))  # noqa: E731
    earlier, deadline = latest(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        if latest() - earlier:
            pid = _flow_run_process(flow_run_id)
            assert pid is not None, "no process runs the flow run"
            os.kill(pid, signal.SIGKILL)
            return
        run = api.get(f"/flow_runs/{flow_run_id}").json()
        assert run["state_type"] not in TERMINAL, f"the run ended before PPO checkpointed: {run['state_name']}"
        time.sleep(0.2)
    raise AssertionError("PPO saved no checkpoint in time")


def _logs(api: httpx.Client) -> str:
    out, offset = [], 0
    while True:
        page = api.post("/logs/filter", json={"limit": 200, "offset": offset}).json()
        out += [entry["message"] for entry in page]
        if len(page) < 200:
            return "\n".join(out)
        offset += 200


def _create_flow_run(api: httpx.Client, deployment_id: str, parameters: dict) -> dict:
    """POST create_flow_run as the UI does."""
    resp = api.post(f"/deployments/{deployment_id}/create_flow_run", json={"parameters": parameters})
    assert resp.status_code < 300, (resp.status_code, resp.text[:500])
    return resp.json()


def _wait_flow_run(api: httpx.Client, run_id: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = api.get(f"/flow_runs/{run_id}").json()
        if run["state_type"] in TERMINAL:
            return run
        time.sleep(0.5)
    raise AssertionError(f"flow run {run_id} not finished after {timeout} s: {run['state_name']}")


def _why(run: dict, ws: Path) -> str:
    log = (ws / "run" / "serve.log").read_text(errors="replace")
    return f"{run['state_name']}: {run['state'].get('message')}\n--- serve.log (tail) ---\n{log[-4000:]}"


def _runs_of(api: httpx.Client, flow_name: str) -> list[dict]:
    flow = api.get(f"/flows/name/{flow_name}")
    if flow.status_code != 200:
        return []
    body = {
        "flows": {"id": {"any_": [flow.json()["id"]]}},
        "flow_runs": {"state": {"type": {"not_any_": ["SCHEDULED"]}}},
    }
    return api.post("/flow_runs/filter", json=body).json()


class _Patient(httpx.HTTPTransport):
    """A busy SQLite server answers 5xx for a while (a PATCH of a deployment once got 503 under `make test`'s load):
    every request is tried again, 5 s apart, for about 25 s before its 5xx counts."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(5):
            resp = super().handle_request(request)
            if resp.status_code < 500:
                return resp
            resp.close()
            time.sleep(5)
        return super().handle_request(request)


def _api(info: dict, auth: bool = True) -> httpx.Client:
    """A client of the Prefect API; with the auth string (HTTP Basic, as the UI sends it) unless ``auth`` is False."""
    token = base64.b64encode(info["auth"].encode()).decode()
    headers = {"Authorization": f"Basic {token}"} if auth else {}
    return httpx.Client(base_url=info["prefect_api"], timeout=30, headers=headers, transport=_Patient())


def test_the_deployment_api_refuses_the_exfiltration_request(servers, tmp_path):
    """An unauthenticated create_flow_run of text2grad with an LLM annotator pointed at a local listener and a key
    variable of the serve process's environment: 401; with the auth string the run fails on its parameters, naming
    the field, and the listener never hears from the serve process. A run that maps the columns of a private file of
    the serving user fails on its parameters too, without the file's content; the MLflow server answers 401 without
    its credentials."""
    ws, info = servers
    assert oct(Path(info["prefect_auth_file"]).stat().st_mode & 0o777) == "0o600"
    assert oct(Path(info["mlflow_auth_file"]).stat().st_mode & 0o777) == "0o600"
    search = "/api/2.0/mlflow/experiments/search?max_results=5"
    assert httpx.get(info["mlflow"] + search, timeout=30).status_code == 401
    assert httpx.get(info["mlflow"] + search, auth=("t2g", "guess"), timeout=30).status_code == 401
    user, _, password = Path(info["mlflow_auth_file"]).read_text().partition(":")
    assert httpx.get(info["mlflow"] + search, auth=(user, password), timeout=30).status_code == 200
    import sqlite3  # the generated password is stored under a one-round hash: scrypt cost 0.2 CPU-s per request

    with sqlite3.connect(ws / "mlflow-auth.db") as db:
        (stored,) = db.execute("SELECT password_hash FROM users WHERE username = ?", (user,)).fetchone()
    assert stored.startswith("pbkdf2:sha256:1$"), stored
    listener = Listener()
    try:
        api, anonymous = _api(info), _api(info, auth=False)
        dep = api.get("/deployments/name/text2grad/text2grad").json()
        llm = {"annotator": "llm", "base_url": listener.url, "api_key_env": "SOME_SECRET_VAR", "max_retries": 0}
        parameters = _tiny_run(dep["parameters"]["config"], annotate=llm)
        refused = anonymous.post(f"/deployments/{dep['id']}/create_flow_run", json={"parameters": parameters})
        assert refused.status_code == 401, refused.text
        assert anonymous.post("/block_documents/filter", json={"include_secrets": True}).status_code == 401
        preflight = anonymous.options(
            "/flow_runs/filter",
            headers={"Origin": "http://attacker.example", "Access-Control-Request-Method": "POST"},
        )
        assert preflight.headers.get("access-control-allow-origin") in (None, ""), preflight.headers
        secret = tmp_path / "private.json"
        secret.write_text('{"user": "alice", "password": "hunter2-canary"}\n')
        secret.chmod(0o600)
        columns = {"id": "password", "prompt": "user", "response": "user"}
        data = {"source": "hub", "dataset": str(secret), "columns": columns}
        exfiltrating = _create_flow_run(api, dep["id"], parameters)  # both at once: the serve process runs both
        reading = _create_flow_run(api, dep["id"], _tiny_run(dep["parameters"]["config"], annotate=llm, data=data))

        run = _wait_flow_run(api, exfiltrating["id"], 180)
        message = run["state"].get("message") or ""
        assert run["state_type"] == "FAILED", _why(run, ws)
        assert "annotate.base_url" in message and "annotate.api_key_env" in message, message
        time.sleep(2)
        assert listener.received == [], listener.received

        run = _wait_flow_run(api, reading["id"], 180)
        message = run["state"].get("message") or ""
        assert run["state_type"] == "FAILED" and "data.dataset" in message, _why(run, ws)
        assert "hunter2" not in message + (ws / "run" / "serve.log").read_text(errors="replace")
        assert not list((ws / "artifacts").glob("feedback/*"))
    finally:
        listener.close()


def test_ui_run_crash_retry_placement_reannotation_and_lineage(worker):
    ws, info = worker
    api = _api(info)
    names = {d["name"] for d in api.post("/deployments/filter", json={}).json()}
    assert {"text2grad", "feedback-sensor", "reannotate"} <= names

    # 1. the UI's Run button: POST /deployments/{id}/create_flow_run with the form's parameters; evaluation placed on
    #    the work pool
    dep = api.get("/deployments/name/text2grad/text2grad").json()
    assert dep["parameters"]["config"]["workspace"]["root"] == str(ws)  # the form's defaults: this workspace
    created = _create_flow_run(api, dep["id"], _tiny_run(dep["parameters"]["config"], placement={"evaluate": POOL}))
    _crash_and_retry(api, ws, created)
    _outcome_on_the_parent(api, created)
    _mlflow_lineage(info, created)
    _mlflow_dashboard(info, created)
    _reannotation_to_a_policy(api, ws, info)
    assert _runs_of(api, "feedback-sensor") == [], "the inbox watch started flow runs"  # nothing per interval


def _crash_and_retry(api: httpx.Client, ws: Path, created: dict) -> None:
    """2. the process dies during PPO; the UI's Retry button re-runs the same flow run, which resumes."""
    _kill_during_ppo(api, ws, created["id"], 420)
    crashed = _wait_flow_run(api, created["id"], 120)
    assert crashed["state_type"] == "CRASHED", _why(crashed, ws)
    _stale_runs_closed_at_once(api, created["id"])
    retry = {"state": {"type": "SCHEDULED", "name": "AwaitingRetry", "message": "Retry from the UI"}, "force": True}
    assert api.post(f"/flow_runs/{created['id']}/set_state", json=retry).status_code < 300
    run = _wait_flow_run(api, created["id"], 420)
    assert run["state_type"] == "COMPLETED", _why(run, ws)
    logs = _logs(api)
    assert "retrying; the previous attempt ended Crashed" in logs and "PPO resumes from step-" in logs, logs[-3000:]
    stale = api.post("/task_runs/filter", json={"task_runs": {"state": {"type": {"any_": ["RUNNING", "PENDING"]}}}})
    assert stale.json() == [], "a killed task run was left Running"
    placed = [r for r in api.post("/flow_runs/filter", json={}).json() if r.get("work_pool_name") == POOL]
    assert [r["state_type"] for r in placed] == ["COMPLETED"]  # evaluate ran on the pool's worker


def _stale_runs_closed_at_once(api: httpx.Client, flow_run_id: str) -> None:
    """The crash hook (run by the serve process that watched the killed one) closes the subflow runs and task runs
    the dead process left Running, before anyone presses Retry."""
    deadline, left = time.monotonic() + 90, None
    while time.monotonic() < deadline:
        subflows = api.post("/flow_runs/filter", json={"flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}}})
        tasks = api.post("/task_runs/filter", json={"task_runs": {"state": {"type": {"any_": ["RUNNING"]}}}})
        left = [r["name"] for r in subflows.json() if r["state_type"] == "RUNNING"] + [t["name"] for t in tasks.json()]
        if not left:
            break
        time.sleep(0.5)
    assert not left, f"left Running after the crash: {left}"
    states = {r["state_type"] for r in subflows.json()}
    assert "CRASHED" in states, states  # the ppo group, whose process died


def _outcome_on_the_parent(api: httpx.Client, created: dict) -> None:
    """The run people open carries the outcome: a summary artifact and a log line, not only its subflows."""
    found = api.post("/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [created["id"]]}}}).json()
    outcome = [a for a in found if a.get("key") == "text2grad-outcome"]
    assert outcome, [a.get("key") for a in found]
    markdown = outcome[0]["data"]
    assert "text2grad-policy version 1:" in markdown and "## Stage groups" in markdown and "| ppo |" in markdown
    assert "fact error (%, lower is better)" in markdown and "heatmaps/index.html" in markdown
    query = {"logs": {"flow_run_id": {"any_": [created["id"]]}}, "sort": "TIMESTAMP_DESC", "limit": 200}

    def outcome_logged() -> bool:  # among the run's last lines: the outcome comes at its end
        logs = api.post("/logs/filter", json=query).json()
        return any(entry["message"].startswith("outcome: fact error") for entry in logs)

    deadline = time.monotonic() + 60  # the run's logs reach the API from a background shipper, a little after it ends
    while not outcome_logged() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert outcome_logged()


def _mlflow_lineage(info: dict, created: dict) -> None:
    """3. MLflow (over HTTP): one parent run, the killed stage run closed, every stage output linked, lineage."""
    import mlflow

    client = mlflow.MlflowClient(info["mlflow"])
    exp = client.get_experiment_by_name("text2grad")
    parent = client.search_runs(
        [exp.experiment_id], f"tags.`prefect.flow_run_id` = '{created['id']}' and tags.`t2g.role` = 'pipeline'"
    )
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    children = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent[0].info.run_id}'")
    assert sorted(r.info.status for r in children if r.data.tags["t2g.stage"] == "ppo") == ["FINISHED", "KILLED"]
    stages = {r.data.tags["t2g.stage"]: r for r in children if r.info.status == "FINISHED"}
    assert {"feedback", "models", "annotate", "align", "validate", "reward_model", "ppo", "evaluate"} <= set(stages)
    links = {
        k.removeprefix("t2g.stage_run."): v for k, v in parent[0].data.tags.items() if k.startswith("t2g.stage_run.")
    }
    assert links["ppo"] == stages["ppo"].info.run_id and links["evaluate"] == stages["evaluate"].info.run_id
    assert {"pipeline.json", "evaluation"} <= {a.path for a in client.list_artifacts(parent[0].info.run_id)}
    produced = {d.dataset.digest for d in stages["feedback"].inputs.dataset_inputs}
    consumed = {d.dataset.digest for d in stages["annotate"].inputs.dataset_inputs if d.dataset.name == "feedback"}
    assert consumed and consumed <= produced
    # the policy adapter is registered, and its lineage walks back to the feedback
    from t2g_mlflow.lineage import lineage_chain

    versions = client.search_model_versions("name = 'text2grad-policy'")
    assert len(versions) == 1 and versions[0].run_id == stages["ppo"].info.run_id
    chain = "\n".join(line for _, line in lineage_chain("text2grad-policy", versions[0].version, info["mlflow"]))
    assert chain.index("[ppo]") < chain.index("[feedback]")
    rm = {v.run_id for v in client.search_model_versions("name = 'text2grad-reward-model'")}
    assert stages["reward_model"].info.run_id in rm  # trained by its stage, refreshed by PPO's critique loop (auto)
    assert rm == {stages["reward_model"].info.run_id, stages["ppo"].info.run_id}
    refreshed = client.get_model_version_by_alias("text2grad-reward-model", "refreshed")
    assert refreshed.run_id == stages["ppo"].info.run_id


def _mlflow_dashboard(info: dict, created: dict) -> None:
    """4. MLflow as a dashboard: model-training experiment, outcome metrics and verdict on the parent run, readable
    registry tags and descriptions, a resumed PPO run holding every step, heatmaps logged once, consumers linking
    their producer runs."""
    import mlflow

    client = mlflow.MlflowClient(info["mlflow"])
    exp = client.get_experiment_by_name("text2grad")
    assert exp.tags.get("mlflow.experimentKind") == "custom_model_development"
    parent = client.search_runs(
        [exp.experiment_id], f"tags.`prefect.flow_run_id` = '{created['id']}' and tags.`t2g.role` = 'pipeline'"
    )[0]
    assert {"fact_error_before", "fact_error_after"} <= set(parent.data.metrics)
    assert parent.data.tags["t2g.verdict"] in ("better", "worse", "no clear difference")
    version = client.search_model_versions("name = 'text2grad-policy'")[0]
    assert version.tags["t2g.metric.direction"] == "lower_is_better"
    assert float(version.tags["t2g.metric.fact_error"]) >= 0 and "feedback version 1" in version.description
    rm = client.get_model_version_by_alias("text2grad-reward-model", "candidate")  # the stage's, not a refresh
    assert "Reward model (tagger)" in rm.description
    ppo = client.search_runs(
        [exp.experiment_id],
        f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' and tags.`t2g.stage` = 'ppo' "
        "and attributes.status = 'FINISHED'",
    )[0]
    steps = sorted(m.step for m in client.get_metric_history(ppo.info.run_id, "reward/total_mean"))
    assert sorted(set(steps)) == list(range(KILLABLE_PPO["steps"])), steps  # the resumed run holds every step
    top = [a.path for a in client.list_artifacts(ppo.info.run_id)]
    pages = [a.path for a in client.list_artifacts(ppo.info.run_id, "heatmaps")]
    assert not [p for p in top if p.endswith(".html")] and "heatmaps/index.html" in pages, (top, pages)
    assert len(pages) == len(set(pages)) == KILLABLE_PPO["steps"] + 1  # one page per step (log_every 1), the index
    annotate = client.search_runs(
        [exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' and tags.`t2g.stage` = 'annotate'"
    )[0]
    assert "produced by run [feedback]" in annotate.data.tags["mlflow.note.content"]


def _reannotation_to_a_policy(api: httpx.Client, ws: Path, info: dict) -> None:
    """5. new feedback in the inbox -> sensor event -> `reannotate` run (debounced; then=policy set on its deployment,
    as in the UI) -> new versions of both datasets and a policy trained and evaluated on the latest version; every
    MLflow run it opened is closed."""
    import mlflow

    from t2g_core.demo import make_demo_feedback

    dep = api.get("/deployments/name/reannotate/reannotate").json()
    parameters = {"config": dep["parameters"]["config"], "preset": "tiny", "then": "policy"}  # the preset as shipped
    assert api.patch(f"/deployments/{dep['id']}", json={"parameters": parameters}).status_code < 300
    new = make_demo_feedback("summarization", 3, seed=99)
    new["id"] = [f"inbox-{i}" for i in range(len(new))]
    new.to_json(ws / "inbox" / "batch-1.jsonl", orient="records", lines=True)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and not _runs_of(api, "reannotate"):
        time.sleep(0.5)
    reruns = _runs_of(api, "reannotate")
    assert reruns, "no reannotate run was started by the feedback event"
    assert reruns[0]["parameters"]["path"].endswith(".jsonl")
    done = _wait_flow_run(api, reruns[0]["id"], 900)
    assert done["state_type"] == "COMPLETED", _why(done, ws)
    pointers = json.loads((ws / "artifacts" / "DATASETS.json").read_text())  # both datasets' versions, one file
    latest, annotations = pointers["feedback"], pointers["annotations"]
    assert pointers["version"] == 2 and latest["n_rows"] == annotations["n_rows"] == 24 + 3
    assert pointers["annotations_cover"] == latest["sha256"]
    client = mlflow.MlflowClient(info["mlflow"])
    second = client.get_model_version("text2grad-policy", "2")
    assert "feedback version 2 (27 rows, sha256 " in second.description
    exp = client.get_experiment_by_name("text2grad")
    deadline = time.monotonic() + 30  # the parent run is closed by the flow's on_completion hook, after Completed
    while (open_runs := client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)
    assert [r.info.run_name for r in open_runs] == []
