"""Serve the deployments from one process (``make up`` starts it), or register stage deployments on a work pool.

    python deployments/serve.py --workspace t2g-workspace [--sensor-interval 60] [--cron "0 3 * * *"] [--debounce 30]
        [--allow-endpoint http://127.0.0.1:8000/v1 ...] [--allow-key-env OPENAI_API_KEY ...]
        [--allow-input-root /data/feedback ...] [--allow-hub-ids]
    python deployments/serve.py --workspace t2g-workspace --pool t2g-gpu   # stage flows on a work pool, then exit

Serving (no work pool or worker needed on one machine):
- ``text2grad/text2grad``: the pipeline, started from the UI form (its defaults point at this workspace); optional cron.
- the inbox watch (a thread of this process, no flow runs): every ``--sensor-interval`` seconds it lists the inbox and,
  when a new file has landed, emits one event per new file (``flows.feedback.watch_inbox``).
- ``feedback-sensor/feedback-sensor``: the same scan as a flow run, on demand from the UI.
- ``reannotate/reannotate``: event trigger on ``text2grad.feedback.landed``, debounced: the first event of a burst
  schedules one run ``--debounce`` seconds later and the rest of the burst within that window adds no runs.

What a run may set is fixed here (``t2g_core.serving.ServePolicy``, handed to the flow runs through the environment,
read by ``t2g_env.serving``): endpoint URLs only from ``--allow-endpoint``, key variables only from ``--allow-key-env``
(both repeatable, or comma-separated in ``T2G_ALLOWED_ENDPOINTS`` / ``T2G_ALLOWED_KEY_ENVS``), this workspace, its
MLflow tracking URI and its inbox; ``annotate.sandbox_isolation=none`` only with ``T2G_ALLOW_UNSANDBOXED=1`` in
this process's environment. Input files and model folders only from the workspace's inbox, artifacts, models and
checkpoints and the folders ``--allow-input-root`` names (``T2G_ALLOWED_INPUT_ROOTS``), Hugging Face ids only with
``--allow-hub-ids`` (``T2G_ALLOW_HUB_IDS=1``). A run that sets anything else fails before it reads a file or sends a
request, naming the field.

``--pool P`` instead registers the placeable stage-group flows (``t2g_core.stages.registry.PLACEABLE``: ``annotate``,
``align_and_validate``, ``warmup``, ``policy_samples``, ``reward_model``, ``ppo``, ``evaluate``) as deployments named
``P`` on work pool ``P``,
with this project folder as their source and the workspace's result storage, so ``placement.<group>: P`` runs that
group on a worker of ``P``.
The same deployments for a work pool (process, docker or kubernetes) are in ``deployments/prefect.yaml``.
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta
from pathlib import Path

from t2g_cli import runtime
from t2g_core.config import PipelineConfig, WorkspaceConfig
from t2g_core.serving import ServePolicy
from t2g_core.stages.registry import PLACEABLE
from t2g_core.workspace import Workspace

PROJECT = Path(__file__).resolve().parents[1]


def form_defaults(workspace: str) -> dict:
    """The ``config`` parameter the text2grad deployment is registered with: only this workspace. Every other field
    shows the code's defaults in the UI form (the ones `t2g run` and `t2g demo` use), so a deployment registered
    before a config field was added or renamed still starts."""
    root = str(Path(workspace).resolve())
    return {"workspace": PipelineConfig.model_validate({"workspace": {"root": root}}).workspace.model_dump(mode="json")}


def default_input_roots(workspace_root: str) -> tuple[str, ...]:
    """The workspace's inbox and its data and model folders: not its ``run/`` folder (the servers' credentials), its
    databases or caches."""
    ws = Workspace.at(workspace_root)
    return tuple(str(p) for p in (ws.inbox, ws.artifacts, ws.models, ws.checkpoints))


def serve_policy(
    workspace: str, endpoints: list[str], key_envs: list[str], input_roots: list[str] = (), hub_ids: bool = False
):
    """The policy the served flow runs check their parameters against (``t2g_core.serving``)."""
    served = form_defaults(workspace)["workspace"]
    return ServePolicy(
        workspace_root=served["root"],
        mlflow_tracking_uri=served["mlflow_tracking_uri"],
        inbox=str(Workspace.at(served["root"]).inbox),
        endpoints=tuple(endpoints),
        key_envs=tuple(key_envs),
        input_roots=default_input_roots(served["root"]) + tuple(str(Path(r).resolve()) for r in input_roots),
        hub_ids=hub_ids,
    )


def _listed(values: list[str] | None, variable: str) -> list[str]:
    """Repeated option values plus the comma-separated entries of environment variable ``variable``."""
    from_env = [v.strip() for v in os.environ.get(variable, "").split(",") if v.strip()]
    return [*(values or []), *from_env]


def build_deployments(workspace: str, *, cron: str | None = None, debounce: float = 30) -> list:
    from prefect.events import DeploymentEventTrigger

    from flows.feedback import EVENT, RESOURCE_PREFIX, feedback_sensor, reannotate
    from flows.text2grad import text2grad

    config = form_defaults(workspace)
    trigger = DeploymentEventTrigger(
        name="feedback-landed",
        expect={EVENT},
        match={"prefect.resource.id": f"{RESOURCE_PREFIX}*"},
        posture="Reactive",
        threshold=1,
        within=timedelta(seconds=debounce),
        schedule_after=timedelta(seconds=debounce),
        parameters={"path": "{{ event.payload.path }}"},
    )
    return [
        text2grad.to_deployment(name="text2grad", parameters={"config": config}, cron=cron, tags=["text2grad"]),
        feedback_sensor.to_deployment(
            name="feedback-sensor", parameters={"workspace": config["workspace"]}, tags=["text2grad"]
        ),
        reannotate.to_deployment(
            name="reannotate", parameters={"config": config}, triggers=[trigger], tags=["text2grad"]
        ),
    ]


def deploy_stage_flows(pool: str, workspace: str, project: Path = PROJECT, groups=PLACEABLE) -> list[str]:
    """Register the placeable stage flows (``groups`` of them) on work pool ``pool`` from ``project``'s source;
    returns their names."""
    from prefect import flow as prefect_flow

    import flows.stages as stages

    results = str(Path(workspace).resolve() / "prefect-results")
    names = []
    for attr in groups:
        stage_flow = getattr(stages, attr)
        remote = prefect_flow.from_source(source=str(project), entrypoint=f"flows/stages.py:{attr}")
        remote.deploy(
            name=pool,
            work_pool_name=pool,
            build=False,
            push=False,
            print_next_steps=False,
            job_variables={"env": {"PREFECT_RESULTS_LOCAL_STORAGE_PATH": results}},
            tags=["text2grad"],
        )
        names.append(f"{stage_flow.name}/{pool}")
    return names


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default="t2g-workspace")
    parser.add_argument("--sensor-interval", type=float, default=60.0, help="Seconds between inbox listings.")
    parser.add_argument("--cron", default=None, help="Optional cron schedule of text2grad, e.g. '0 3 * * *'.")
    parser.add_argument("--debounce", type=float, default=30.0, help="Seconds a burst of new files is collected.")
    parser.add_argument("--limit", type=int, default=2, help="Flow runs executed at once.")
    parser.add_argument("--pool", default=None, help="Register the stage flows on this work pool and exit.")
    parser.add_argument("--groups", default=",".join(PLACEABLE), help="With --pool: which stage groups.")
    parser.add_argument(
        "--allow-endpoint", action="append", help="An endpoint base URL runs may use (repeat; T2G_ALLOWED_ENDPOINTS)."
    )
    parser.add_argument(
        "--allow-key-env", action="append", help="A key variable runs may read (repeat; T2G_ALLOWED_KEY_ENVS)."
    )
    parser.add_argument(
        "--allow-input-root",
        action="append",
        help="A folder runs may read inputs from (repeat; T2G_ALLOWED_INPUT_ROOTS).",
    )
    parser.add_argument(
        "--allow-hub-ids", action="store_true", help="Runs may name Hugging Face ids (or T2G_ALLOW_HUB_IDS=1)."
    )
    args = parser.parse_args(argv)

    runtime.prepare_environment(args.workspace)
    policy = serve_policy(
        args.workspace,
        _listed(args.allow_endpoint, "T2G_ALLOWED_ENDPOINTS"),
        _listed(args.allow_key_env, "T2G_ALLOWED_KEY_ENVS"),
        _listed(args.allow_input_root, "T2G_ALLOWED_INPUT_ROOTS"),
        args.allow_hub_ids or os.environ.get("T2G_ALLOW_HUB_IDS") == "1",
    )
    if args.pool:
        for name in deploy_stage_flows(args.pool, args.workspace, groups=args.groups.split(",")):
            print(f"deployment {name} on work pool {args.pool}")
        for variable, value in policy.environment().items():
            print(f"start the workers of {args.pool} with: export {variable}='{value}'")
        auth = Path(policy.workspace_root) / "run" / "mlflow-auth"
        print(f"and MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD set to the user:password in {auth} (make up)")
        return
    import threading

    from prefect import serve

    from flows.feedback import watch_inbox

    os.environ.update(policy.environment())  # the flow runs are this process's children: they inherit it
    print(
        f"serve-time policy: endpoints {list(policy.endpoints)}, key variables {list(policy.key_envs)}, input folders "
        f"{list(policy.input_roots)}, Hugging Face ids {'allowed' if policy.hub_ids else 'refused'}"
    )
    deployments = build_deployments(args.workspace, cron=args.cron, debounce=args.debounce)
    workspace = WorkspaceConfig(**form_defaults(args.workspace)["workspace"])
    threading.Thread(
        target=watch_inbox, args=(workspace, args.sensor_interval, threading.Event()), daemon=True, name="inbox-watch"
    ).start()
    serve(*deployments, limit=args.limit)


if __name__ == "__main__":
    main()
