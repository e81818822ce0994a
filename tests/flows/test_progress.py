"""Progress you can watch in Prefect: a long stage's reports become a progress artifact (percentage, metrics, time
left) and a log line now and then; a broken artifact API never fails the stage."""

from __future__ import annotations

import pytest
from prefect import flow, task

from tasks.progress import PrefectProgress, describe

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.slow]  # the harness serves a Prefect API


@task
def long_stage(steps: int) -> list[str]:
    lines: list[str] = []
    progress = PrefectProgress("ppo", lines.append, every_s=0.0, log_every_s=3600.0)
    for step in range(1, steps + 1):
        progress("ppo", step, steps, {"reward": 0.5 + step / 10, "kl": 0.01})
    return lines


@flow
def watched(steps: int) -> list[str]:
    return long_stage(steps)


def test_a_long_stage_updates_its_progress_artifact_and_logs_start_and_end():
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    lines = watched(4)
    assert lines[0].startswith("ppo: step 1/4, reward 0.6, kl 0.01") and "left" in lines[0]
    assert lines[-1].startswith("ppo: step 4/4, reward 0.9") and "left" not in lines[-1]
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["ppo-ppo"])))
    latest = max(found, key=lambda a: a.created)
    assert latest.type == "progress" and float(latest.data) == 100.0
    assert latest.description.startswith("ppo: step 4/4, reward 0.9, kl 0.01")


def test_the_description_gives_metrics_elapsed_and_time_left():
    text = describe("reward model", 30, 120, {"loss": 0.1234567}, elapsed=60.0)
    assert text == "reward model: step 30/120, loss 0.1235, 1m00s elapsed, 3m00s left"


def _three_steps() -> list[str]:
    lines: list[str] = []
    progress = PrefectProgress("ppo", lines.append, every_s=0.0)
    for step in range(1, 4):
        progress("ppo", step, 3)
    return lines


@flow
def broken_api() -> list[str]:
    return task(_three_steps)()


def test_a_failing_artifact_api_is_reported_once_and_never_raises(monkeypatch):
    import prefect.artifacts

    def broken(*args, **kwargs):
        raise ConnectionError("API down")

    monkeypatch.setattr(prefect.artifacts, "create_progress_artifact", broken)
    assert sum("progress artifacts are off" in line for line in broken_api()) == 1


def test_outside_a_task_run_no_artifact_is_attempted(monkeypatch):
    """``task.fn(...)`` (tests, scripts) has no run to show progress in: no API call, so no temporary server."""
    import prefect.artifacts

    calls: list[object] = []
    monkeypatch.setattr(prefect.artifacts, "create_progress_artifact", lambda *a, **k: calls.append(a))
    lines = _three_steps()
    assert calls == [] and lines[-1].startswith("ppo: step 3/3")
