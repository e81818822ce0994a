"""How the machines of a gang start (``layout.<stage>.launcher``); :func:`command` is what ``t2g_core.gang.launch``
runs and relays, given ``launch``: the ``accelerate launch`` of one machine's share for a rendezvous.

``local``: this machine alone, on loopback. ``slurm``: the task runs inside an allocation of ``machines`` nodes (a
Prefect worker submitted with ``deployments/slurm/worker.sbatch``); ``srun`` runs one launch per node, its machine rank
the node's ``SLURM_NODEID``, the rendezvous on the allocation's first node. ``kubernetes``: the task runs in a pod;
``t2g gang-jobset`` creates a JobSet of one pod per machine (``deployments/kubernetes/jobset.yaml``) with the image,
environment and workspace volume of the task's own pod, its machine rank the pod's completion index, the rendezvous
on pod 0's stable host name; it relays pod 0's log, waits for the JobSet and deletes it.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from t2g_core.config.orchestration import Layout
from t2g_core.gang import free_port

Launch = Callable[[tuple[int | str, str, int]], list[str]]  # (machine rank, main address, port) -> its launch
SLURM_RANK, POD_RANK, PORT = "$SLURM_NODEID", "$(MACHINE_RANK)", 29500  # expanded by sh on a node, the kubelet in a pod
JOBSET = Path(__file__).resolve().parents[1] / "deployments" / "kubernetes" / "jobset.yaml"
KEY = "text2grad/stage-key"
ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def command(layout: Layout, launch: Launch, folder: Path, key: str, env: Mapping[str, str]) -> list[str]:
    """What starts every machine's share of the gang of stage ``key``, from this task (``env``: its environment)."""
    if layout.launcher == "slurm":
        return srun(layout, launch, env)
    if layout.launcher == "kubernetes":
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "jobset.json").write_text(json.dumps(jobset(layout, launch, key)), encoding="utf-8")
        return [sys.executable, "-m", "t2g_cli", "gang-jobset", str(folder / "jobset.json")]
    return launch((0, "127.0.0.1", free_port()))


def hostnames(nodelist: str) -> list[str]:
    """Slurm's compact node list (``gpu[01-03,7],login1``) as host names, as ``scontrol show hostnames`` prints it."""
    hosts = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", nodelist):
        if (m := re.match(r"([^\[]*)\[([^\]]*)\](.*)", part)) is None:
            hosts.append(part)
            continue
        for span in m[2].split(","):
            low, _, high = span.partition("-")
            for i in range(int(low), int(high or low) + 1):
                hosts += hostnames(f"{m[1]}{i:0{len(low)}d}{m[3]}")
    return hosts


def srun(layout: Layout, launch: Launch, env: Mapping[str, str]) -> list[str]:
    """One ``accelerate launch`` per node of this task's Slurm allocation, which must have ``layout.machines`` nodes."""
    if "SLURM_JOB_ID" not in env:
        raise ValueError(
            "layout launcher slurm: this task runs outside a Slurm allocation (SLURM_JOB_ID is unset); start the "
            "work pool's worker with `sbatch --nodes N deployments/slurm/worker.sbatch POOL` (docs/gpu.md)"
        )
    nodes = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 0)
    if nodes != layout.machines:
        raise ValueError(
            f"Slurm job {env['SLURM_JOB_ID']} has {nodes} node(s) and the layout asks for {layout.machines} machines: "
            f"submit the worker with sbatch --nodes {layout.machines}, or set machines: {nodes}"
        )
    main = hostnames(env["SLURM_JOB_NODELIST"])[0]  # node 0, where the batch script (the worker) runs
    args = launch((SLURM_RANK, main, free_port()))
    shell = "exec " + " ".join('"$SLURM_NODEID"' if a == SLURM_RANK else shlex.quote(a) for a in args)
    steps = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    cores = [f"--cpus-per-task={env['SLURM_CPUS_ON_NODE']}"] if "SLURM_CPUS_ON_NODE" in env else []  # not 1 core
    return [*steps, *cores, "sh", "-c", shell]


def jobset(layout: Layout, launch: Launch, key: str) -> dict[str, Any]:
    """The JobSet of ``layout.machines`` pods, ``layout.processes`` GPUs each, without what :func:`from_pod` adds."""
    manifest = yaml.safe_load(JOBSET.read_text(encoding="utf-8"))
    name = manifest["metadata"]["name"] = f"t2g-{re.sub('[^a-z0-9-]', '-', key.lower())[:40]}-{secrets.token_hex(3)}"
    manifest["metadata"]["labels"][KEY] = key  # one gang per stage key: a Retry deletes one a killed task left
    job = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
    job["parallelism"] = job["completions"] = layout.machines
    container = job["template"]["spec"]["containers"][0]
    container["command"] = launch((POD_RANK, f"{name}-machine-0-0.{name}", PORT))
    container["resources"]["limits"]["nvidia.com/gpu"] = str(layout.processes)
    return manifest


def from_pod(manifest: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` with the image, environment and ``workspace`` volume of ``pod`` (the task's): the ranks run the
    code the task runs and write where it reads."""
    spec = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    container, own = spec["containers"][0], pod["spec"]["containers"][0]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
    manifest["metadata"]["ownerReferences"] = [owner]  # deleting the task's pod (its Prefect job) deletes the gang
    spec.update({k: pod["spec"][k] for k in ["imagePullSecrets"] if k in pod["spec"]})
    container["image"] = own["image"]
    container["env"] = [e for e in own.get("env", []) if e["name"] != "MACHINE_RANK"] + container["env"]
    container["volumeMounts"] += [m for m in own.get("volumeMounts", []) if m["name"] == "workspace"]
    spec["volumes"] += [v for v in pod["spec"].get("volumes", []) if v["name"] == "workspace"]
    if not any(v["name"] == "workspace" for v in spec["volumes"]):
        raise ValueError(f"pod {pod['metadata']['name']} has no volume named workspace: the ranks cannot share it")
    return manifest


def cluster(env: Mapping[str, str]):
    """An HTTP client of this pod's Kubernetes API server, as its service account, and the pod's namespace."""
    import httpx

    url, token = f"https://{env['KUBERNETES_SERVICE_HOST']}:{env['KUBERNETES_SERVICE_PORT']}", (ACCOUNT / "token")
    auth, timeout = {"Authorization": f"Bearer {token.read_text(encoding='utf-8')}"}, httpx.Timeout(30, read=None)
    client = httpx.Client(base_url=url, verify=str(ACCOUNT / "ca.crt"), headers=auth, timeout=timeout)
    return client, (ACCOUNT / "namespace").read_text(encoding="utf-8").strip()


def run_jobset(api, namespace: str, manifest: dict, pod: str, out: Callable[[str], None], poll: float = 5) -> int:
    """Create ``manifest`` (completed from pod ``pod``; a JobSet of the same stage key is deleted first), relay its
    pod 0's log to ``out`` until it ends, wait for the JobSet to finish and delete it, also when interrupted; 0 when it
    completed, else 1 (the reason told to ``out``)."""
    manifest = from_pod(manifest, api.get(f"/api/v1/namespaces/{namespace}/pods/{pod}").raise_for_status().json())
    name, jobsets = manifest["metadata"]["name"], f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    stale = {"labelSelector": f"{KEY}={manifest['metadata']['labels'][KEY]}", "propagationPolicy": "Background"}
    api.delete(jobsets, params=stale).raise_for_status()  # a gang of this stage whose task was killed
    api.post(jobsets, json=manifest).raise_for_status()
    try:
        followed = False
        while True:
            conditions = api.get(f"{jobsets}/{name}").raise_for_status().json().get("status", {}).get("conditions", [])
            ended = {c["type"]: c for c in conditions if c["type"] in ("Completed", "Failed") and c["status"] == "True"}
            if ended:
                if "Failed" in ended:
                    out(f"JobSet {name} failed: {ended['Failed'].get('message', '')}")
                return 0 if "Completed" in ended else 1
            if not followed and (leader := _leader(api, namespace, name)) is not None:
                with api.stream("GET", f"/api/v1/namespaces/{namespace}/pods/{leader}/log?follow=true") as log:
                    followed = log.status_code == 200
                    for line in log.iter_lines() if followed else ():
                        out(line)
            time.sleep(poll)
    finally:
        api.delete(f"{jobsets}/{name}", params={"propagationPolicy": "Background"})


def _leader(api, namespace: str, name: str) -> str | None:
    """The name of the JobSet's pod 0 once its container started, else None."""
    params = {"labelSelector": f"jobset.sigs.k8s.io/jobset-name={name}"}
    for pod in api.get(f"/api/v1/namespaces/{namespace}/pods", params=params).raise_for_status().json()["items"]:
        index = pod["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index")
        if index == "0" and pod.get("status", {}).get("phase") in ("Running", "Succeeded", "Failed"):
            return pod["metadata"]["name"]
    return None
