"""Serve the deployments from one process (``make up`` starts it): no work pool or worker needed on one machine.

    python -m flows.serve --workspace t2g-workspace [--sensor-interval 60] [--cron "0 3 * * *"] [--debounce 30]

- ``text2grad/text2grad``: the pipeline, started from the UI form (its defaults point at this workspace); optional cron.
- ``feedback-sensor/feedback-sensor``: every ``--sensor-interval`` seconds, one event per new inbox file.
- ``reannotate/reannotate``: event trigger on ``text2grad.feedback.landed``, debounced: the first event of a burst
  schedules one run ``--debounce`` seconds later and the rest of the burst within that window adds no runs.
The same deployments for a work pool (process, docker or kubernetes) are in ``deployments/prefect.yaml``.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path


def build_deployments(
    workspace: str, *, sensor_interval: float = 60, cron: str | None = None, debounce: float = 30
) -> list:
    from prefect.events import DeploymentEventTrigger

    from flows.feedback import EVENT, RESOURCE_PREFIX, feedback_sensor, reannotate
    from flows.text2grad import text2grad
    from t2g_core.config import PipelineConfig

    root = str(Path(workspace).resolve())
    # only the workspace is fixed; every other field takes the code's current default, so a deployment registered
    # before a config field was added or renamed still starts
    config = {
        "workspace": PipelineConfig.model_validate({"workspace": {"root": root}}).workspace.model_dump(mode="json")
    }
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
            name="feedback-sensor",
            parameters={"workspace": config["workspace"]},
            interval=sensor_interval,
            tags=["text2grad"],
        ),
        reannotate.to_deployment(
            name="reannotate", parameters={"config": config}, triggers=[trigger], tags=["text2grad"]
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default="t2g-workspace")
    parser.add_argument("--sensor-interval", type=float, default=60.0, help="Seconds between inbox scans.")
    parser.add_argument("--cron", default=None, help="Optional cron schedule of text2grad, e.g. '0 3 * * *'.")
    parser.add_argument("--debounce", type=float, default=30.0, help="Seconds a burst of new files is collected.")
    parser.add_argument("--limit", type=int, default=2, help="Flow runs executed at once.")
    args = parser.parse_args(argv)

    from flows.runtime import prepare_environment

    prepare_environment(args.workspace)
    from prefect import serve

    deployments = build_deployments(
        args.workspace, sensor_interval=args.sensor_interval, cron=args.cron, debounce=args.debounce
    )
    serve(*deployments, limit=args.limit)


if __name__ == "__main__":
    main()
