"""A gang across machines (``t2g_core.machines``), without a cluster: the ``srun`` command a task inside a (fake) Slurm
allocation runs, and its per-node commands joining one gloo group on loopback; the JobSet a task in a pod creates,
checked against the JobSet API's typed models (``kubeflow-trainer-api``, generated from the JobSet and Kubernetes
OpenAPI), and the Kubernetes API calls of ``t2g gang-jobset`` against a fake API server."""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pydantic
import pytest
from kubeflow_trainer_api.models import (
    IoK8sApiBatchV1JobSpec,
    IoK8sApiCoreV1Container,
    IoK8sApiCoreV1PodSpec,
    JobsetV1alpha2JobSet,
)

from t2g_core.config.orchestration import Layout
from t2g_core.gang import GangRun, free_port, launch_command
from t2g_core.machines import POD_RANK, PORT, command, from_pod, hostnames, jobset, run_jobset, srun

ROOT = Path(__file__).resolve().parents[2]
DDP = ROOT / "deployments" / "accelerate" / "ddp.yaml"
SLURM = Layout(processes=8, machines=3, launcher="slurm")
K8S = Layout(processes=8, machines=2, launcher="kubernetes")


def _launch(layout: Layout, folder: Path = Path("/workspace/gang/k")):
    spec = GangRun(function="t2g_core.stages.ppo.train", inputs={}, workspace={}, key="k", world=2, folder=str(folder))
    return functools.partial(launch_command, spec, layout, DDP)


def _after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        ("node7", ["node7"]),
        ("node[01-03]", ["node01", "node02", "node03"]),
        ("gpu[08-10,12],login1", ["gpu08", "gpu09", "gpu10", "gpu12", "login1"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ],
)
def test_slurm_node_lists_expand_as_scontrol_show_hostnames(nodelist, hosts):
    assert hostnames(nodelist) == hosts


def test_the_srun_of_a_slurm_allocation_starts_one_launch_per_node_with_its_node_rank():
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_NODELIST": "gpu[07-09]"}
    args = srun(SLURM, _launch(SLURM), env | {"SLURM_CPUS_ON_NODE": "96"})
    assert args[:5] == ["srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert args[5:8] == ["--cpus-per-task=96", "sh", "-c"] and args[8].startswith("exec ")  # a step's task: all cores
    assert srun(SLURM, _launch(SLURM), env)[5:7] == ["sh", "-c"]
    shell = args[8]
    assert '--machine_rank "$SLURM_NODEID"' in shell and "--main_process_ip gpu07" in shell
    assert "--num_machines 3" in shell and "--num_processes 24" in shell


@pytest.mark.parametrize(
    "env, error",
    [
        ({}, "outside a Slurm allocation"),
        ({"SLURM_JOB_ID": "42", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "n[1-2]"}, "has 2 node.*asks for 3"),
    ],
)
def test_a_slurm_launch_outside_a_fitting_allocation_is_refused(env, error):
    with pytest.raises(ValueError, match=error):
        srun(SLURM, _launch(SLURM), env)


def test_machines_above_one_need_a_launcher():
    with pytest.raises(pydantic.ValidationError, match="needs a launcher"):
        Layout(machines=2)


FAKE_SRUN = """import os, subprocess, sys
args = sys.argv[1:]
nodes = int(next(a for a in args if a.startswith("--nodes=")).split("=")[1])
step = args[args.index("sh"):]
procs = [subprocess.Popen(step, env={**os.environ, "SLURM_NODEID": str(i)}) for i in range(nodes)]
sys.exit(max(p.wait() for p in procs))
"""
JOINS = "from t2g_cli._common import echo, join_processes; s = join_processes(2); echo(f'rank {s.process_index} of 2')"


def _run_machines(launcher: str, tmp_path: Path) -> list[str]:
    """Run the per-machine commands the task computes for 2 machines of one process each, here: under Slurm through
    an ``srun`` that starts each node's step with its ``SLURM_NODEID``, as Slurm does; under Kubernetes each pod's
    command with ``$(MACHINE_RANK)`` expanded as the kubelet does and pod 0's host name resolved to loopback."""
    (tmp_path / "srun").write_text(f"#!{sys.executable}\n{FAKE_SRUN}")
    (tmp_path / "srun").chmod(0o755)
    (tmp_path / "joins.py").write_text(JOINS)
    layout = Layout(processes=1, machines=2, launcher=launcher)

    def launch(rendezvous):
        args = _launch(layout, tmp_path)(rendezvous)
        return args[: args.index("-m", args.index("--dynamo_backend"))] + [str(tmp_path / "joins.py")]

    allocation = {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "127.0.0.1,127.0.0.2"}
    args = command(layout, launch, tmp_path, "k", allocation)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    if launcher == "slurm":
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.split("\n")[:2]
    manifest = json.loads((tmp_path / "jobset.json").read_text())
    leader, port = f"{manifest['metadata']['name']}-machine-0-0.{manifest['metadata']['name']}", str(free_port())
    pod = _pod(manifest)["containers"][0]["command"]
    expand = {POD_RANK: None, leader: "127.0.0.1", str(PORT): port}
    pods = [
        subprocess.Popen(
            [str(i) if a == POD_RANK else expand.get(a, a) for a in pod], env=env, stdout=subprocess.PIPE, text=True
        )
        for i in (0, 1)
    ]
    outs = [p.communicate(timeout=180)[0] for p in pods]
    assert [p.returncode for p in pods] == [0, 0]
    return [out.strip() for out in outs]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["slurm", "kubernetes"])
def test_two_machines_of_one_process_each_join_one_gang_on_loopback(launcher, tmp_path):
    """Both machines' launches (machine ranks 0 and 1, one static rendezvous) form one gloo group of 2."""
    assert sorted(_run_machines(launcher, tmp_path)) == ["rank 0 of 2", "rank 1 of 2"]


# The task's pod as the work pool's template makes it (deployments/work-pools/kubernetes-gpu.json), as the API has it
POD = {
    "metadata": {"name": "ppo-abc12-xyz", "uid": "0b6c2d1e-5f4a-4e8b-9c1d-2a3b4c5d6e7f"},
    "spec": {
        "containers": [
            {
                "name": "prefect-job",
                "image": "registry.example.com/text2grad-worker-gpu:1.2",
                "env": [{"name": "MLFLOW_TRACKING_URI", "value": "http://mlflow:5000"}],
                "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}, {"name": "dshm", "mountPath": "/x"}],
            }
        ],
        "volumes": [{"name": "workspace", "persistentVolumeClaim": {"claimName": "t2g-workspace"}}],
    },
}


def _valid(manifest: dict) -> bool:
    """The manifest parses into the JobSet API's typed models and comes back unchanged: no field they do not know
    (the models drop it), no value of the wrong type or outside an enum (they refuse it)."""
    try:
        return JobsetV1alpha2JobSet.from_dict(manifest).to_dict() == manifest
    except (pydantic.ValidationError, ValueError):
        return False


def _pod(manifest: dict) -> dict:
    return manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def test_the_jobset_starts_one_pod_per_machine_with_the_rendezvous_wired_and_is_a_valid_jobset():
    manifest = from_pod(jobset(K8S, _launch(K8S), "ppo-a1b2c3d4e5f6a7b8c9d0e1f2"), copy.deepcopy(POD))
    assert _valid(manifest)
    name = manifest["metadata"]["name"]
    assert re.fullmatch(r"t2g-ppo-a1b2c3d4e5f6a7b8c9d0e1f2-[0-9a-f]{6}", name) and len(f"{name}-machine-0-0") <= 63
    assert manifest["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and manifest["spec"]["network"]["enableDNSHostnames"]
    job = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["completionMode"], job["parallelism"], job["completions"]) == ("Indexed", 2, 2)
    container = _pod(manifest)["containers"][0]
    args = container["command"]
    assert _after(args, "--machine_rank") == "$(MACHINE_RANK)" and _after(args, "--num_machines") == "2"
    assert _after(args, "--main_process_ip") == f"{name}-machine-0-0.{name}"  # pod 0 under the JobSet's service
    assert _after(args, "--num_processes") == "16" and container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    rank = next(e for e in container["env"] if e["name"] == "MACHINE_RANK")
    assert "job-completion-index" in rank["valueFrom"]["fieldRef"]["fieldPath"]
    assert container["image"] == POD["spec"]["containers"][0]["image"]
    assert {"name": "MLFLOW_TRACKING_URI", "value": "http://mlflow:5000"} in container["env"]
    assert {"name": "workspace", "mountPath": "/workspace"} in container["volumeMounts"]
    assert {"name": "workspace", "persistentVolumeClaim": {"claimName": "t2g-workspace"}} in _pod(manifest)["volumes"]


def _unknown_field(m):
    _pod(m)["containers"][0]["gpus"] = 8


def _wrong_type(m):
    m["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = "2"


def _wrong_enum(m):
    m["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] = "indexed"


@pytest.mark.parametrize("breaks", [_unknown_field, _wrong_type, _wrong_enum])
def test_a_broken_jobset_is_refused(breaks):
    manifest = from_pod(jobset(K8S, _launch(K8S), "k"), copy.deepcopy(POD))
    breaks(manifest)
    assert not _valid(manifest)


def test_the_task_writes_the_jobset_beside_the_gang_and_runs_t2g_gang_jobset(tmp_path):
    args = command(K8S, _launch(K8S), tmp_path, "k", {})
    assert args[1:] == ["-m", "t2g_cli", "gang-jobset", str(tmp_path / "jobset.json")]
    assert _valid(from_pod(json.loads((tmp_path / "jobset.json").read_text()), copy.deepcopy(POD)))


def test_a_pod_without_the_workspace_volume_is_refused():
    pod = copy.deepcopy(POD)
    pod["spec"]["volumes"] = []
    with pytest.raises(ValueError, match="no volume named workspace"):
        from_pod(jobset(K8S, _launch(K8S), "k"), pod)


def test_the_kubernetes_work_pool_template_holds_only_job_pod_and_container_fields():
    """Its values are Prefect's placeholders (no typed check); its keys are the Kubernetes API's."""
    template = json.loads((ROOT / "deployments" / "work-pools" / "kubernetes-gpu.json").read_text())
    job = template["job_configuration"]["job_manifest"]["spec"]
    pod = job["template"]["spec"]

    def known(model):
        return {f.alias or name for name, f in model.model_fields.items()}

    assert set(job) <= known(IoK8sApiBatchV1JobSpec), set(job) - known(IoK8sApiBatchV1JobSpec)
    assert set(pod) <= known(IoK8sApiCoreV1PodSpec), set(pod) - known(IoK8sApiCoreV1PodSpec)
    assert set(pod["containers"][0]) <= known(IoK8sApiCoreV1Container)


class FakeApi:
    """The Kubernetes API as ``run_jobset`` uses it: the task's pod, the JobSet (done after its pod 0's log was
    read), its pods, pod 0's log."""

    def __init__(self, outcome: str):
        self.outcome, self.created, self.deleted, self.log_read = outcome, None, [], False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        if method == "POST" and self.outcome == "Forbidden":
            return httpx.Response(403, json={"message": 'jobsets.jobset.x-k8s.io is forbidden: User "default"'})
        if method == "POST" and path.endswith("/jobsets"):
            self.created = json.loads(request.content)
            return httpx.Response(201, json=self.created)
        if method == "DELETE":
            self.deleted.append(f"{path}?{request.url.params.get('labelSelector', '')}")
            return httpx.Response(200, json={})
        if path == "/api/v1/namespaces/ns/pods/task-pod":
            return httpx.Response(200, json=POD)
        if path == "/api/v1/namespaces/ns/pods":
            name = request.url.params["labelSelector"].split("=")[1]
            meta = {"name": f"{name}-machine-0-0-q7x", "annotations": {"batch.kubernetes.io/job-completion-index": "0"}}
            return httpx.Response(200, json={"items": [{"metadata": meta, "status": {"phase": "Running"}}]})
        if path.endswith("/log"):
            self.log_read = True
            return httpx.Response(200, content=b'step 1\nt2g-progress {"phase": "ppo", "done": 1, "total": 2}\n')
        if "/jobsets/" in path:
            message = {"Completed": "", "Failed": "rank 3 exited with code 1"}[self.outcome]
            done = [{"type": self.outcome, "status": "True", "message": message}] if self.log_read else []
            return httpx.Response(200, json={"status": {"conditions": done}})
        return httpx.Response(404)


@pytest.mark.parametrize("outcome, code", [("Completed", 0), ("Failed", 1)])
def test_the_jobset_is_created_followed_and_deleted(outcome, code):
    api = FakeApi(outcome)
    client = httpx.Client(base_url="https://k8s", transport=httpx.MockTransport(api))
    lines: list[str] = []
    manifest = jobset(K8S, _launch(K8S), "k")
    assert run_jobset(client, "ns", manifest, "task-pod", lines.append, poll=0) == code
    name = manifest["metadata"]["name"]
    assert _valid(api.created) and _pod(api.created)["containers"][0]["image"].endswith("worker-gpu:1.2")
    assert lines[:2] == ["step 1", 't2g-progress {"phase": "ppo", "done": 1, "total": 2}']
    assert lines[2:] == ([] if code == 0 else [f"JobSet {name} failed: rank 3 exited with code 1"])
    jobsets = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets"
    assert api.deleted == [f"{jobsets}?text2grad/stage-key=k", f"{jobsets}/{name}?"]  # a killed task's, then its own
    assert api.created["metadata"]["ownerReferences"][0]["uid"] == POD["metadata"]["uid"]


def test_an_interrupted_jobset_is_deleted():
    api = FakeApi("Completed")
    client = httpx.Client(base_url="https://k8s", transport=httpx.MockTransport(api))

    def stopped(line):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_jobset(client, "ns", jobset(K8S, _launch(K8S), "k"), "task-pod", stopped, poll=0)
    assert len(api.deleted) == 2


def _gang_jobset(monkeypatch, tmp_path, api: FakeApi):
    """``t2g gang-jobset`` against ``api``, as in the task's pod."""
    from typer.testing import CliRunner

    import t2g_core.machines
    from t2g_cli import app

    client = httpx.Client(base_url="https://k8s", transport=httpx.MockTransport(api))
    monkeypatch.setattr(t2g_core.machines, "cluster", lambda env: (client, "ns"))
    monkeypatch.setattr(t2g_core.machines, "time", SimpleNamespace(sleep=lambda seconds: None))  # its 5 s polls
    monkeypatch.setenv("HOSTNAME", "task-pod")
    (tmp_path / "jobset.json").write_text(json.dumps(jobset(K8S, _launch(K8S), "k")))
    previous = signal.getsignal(signal.SIGTERM)  # the command makes SIGTERM exit (and delete the JobSet)
    try:
        return CliRunner().invoke(app, ["gang-jobset", str(tmp_path / "jobset.json")])
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_t2g_gang_jobset_relays_pod_0s_log_and_exits_with_the_jobsets_outcome(monkeypatch, tmp_path):
    """Progress lines to stdout only (the task's progress); the others to stdout and stderr (the launcher's log,
    where a failed gang's root cause is looked up); exit 1 when the JobSet failed."""
    api = FakeApi("Failed")
    result = _gang_jobset(monkeypatch, tmp_path, api)
    assert result.exit_code == 1 and api.deleted
    assert result.stdout.splitlines()[:2] == ["step 1", 't2g-progress {"phase": "ppo", "done": 1, "total": 2}']
    assert "t2g-progress" not in result.stderr and "step 1" in result.stderr and "failed: rank 3" in result.stderr


def test_t2g_gang_jobset_says_what_the_api_refused(monkeypatch, tmp_path):
    result = _gang_jobset(monkeypatch, tmp_path, FakeApi("Forbidden"))
    assert result.exit_code == 1
    assert "refused POST /apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets" in result.stderr
    assert "is forbidden" in result.stderr


def test_the_sbatch_script_starts_a_prefect_process_worker_of_the_pool(tmp_path):
    """``deployments/slurm/worker.sbatch`` run as sbatch runs it on the first node (its environment), with a stand-in
    ``prefect`` that prints its arguments; without a workspace it refuses to start."""
    script = ROOT / "deployments" / "slurm" / "worker.sbatch"
    (tmp_path / "bin").mkdir()
    fake = '#!/bin/sh\necho "prefect $* results=$PREFECT_RESULTS_LOCAL_STORAGE_PATH"'
    (tmp_path / "bin" / "prefect").write_text(fake)
    (tmp_path / "bin" / "prefect").chmod(0o755)
    env = {"PATH": os.environ["PATH"], "T2G_VENV": str(tmp_path), "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]"}
    ran = subprocess.run(["bash", script, "t2g-slurm"], env={**env, "T2G_WORKSPACE": "/shared/ws"}, capture_output=True)
    assert ran.returncode == 0, ran.stderr
    worker = "prefect worker start --pool t2g-slurm --type process results=/shared/ws/prefect-results"
    assert ran.stdout.decode().splitlines()[-1] == worker
    refused = subprocess.run(["bash", script], env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "set T2G_WORKSPACE" in refused.stderr
