"""How far a long stage is, in Prefect: a progress artifact per phase, and a log line now and then.

The library reports through ``t2g_core.progress.Progress``; :class:`PrefectProgress` is that protocol for a task run:
the first report of a phase creates a Prefect progress artifact (key ``<stage>-<phase>``, so each phase shows on the
UI's Artifacts page with its history across runs), later reports update it at most every ``every_s`` seconds (and
always at the end) with the percentage and a description holding the phase's metrics and the time left; the run
logger gets a line at most every ``log_every_s`` seconds. A failing artifact call is logged once and never fails the
stage.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "progress"


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def describe(phase: str, done: int, total: int, metrics: Mapping[str, float] | None, elapsed: float) -> str:
    """``ppo: step 120/6000, reward 0.41, kl 0.02, 12m10s elapsed, 9h50m left``."""
    parts = [f"{phase}: step {done}/{total}"]
    parts += [f"{k} {v:.4g}" for k, v in (metrics or {}).items()]
    parts.append(f"{_duration(elapsed)} elapsed")
    if 0 < done < total:
        parts.append(f"{_duration(elapsed / done * (total - done))} left")
    return ", ".join(parts)


@dataclass
class _Phase:
    artifact_id: object | None
    started: float
    last_update: float
    last_log: float


@dataclass
class PrefectProgress:
    stage: str
    log: Callable[[str], None]
    every_s: float = 5.0
    log_every_s: float = 60.0
    phases: dict[str, _Phase] = field(default_factory=dict)
    failed: bool = False

    def __call__(self, phase: str, done: int, total: int, metrics: Mapping[str, float] | None = None) -> None:
        now = time.monotonic()
        state = self.phases.get(phase)
        if state is None:
            state = self.phases[phase] = _Phase(None, now, -1e9, now)
            self.log(describe(phase, done, total, metrics, 0.0))
        text = describe(phase, done, total, metrics, now - state.started)
        finished = done >= total
        if finished or now - state.last_update >= self.every_s:
            state.last_update = now
            self._artifact(phase, state, 100.0 * done / max(total, 1), text)
        if finished or now - state.last_log >= self.log_every_s:
            state.last_log = now
            self.log(text)
        if finished:
            del self.phases[phase]

    def _artifact(self, phase: str, state: _Phase, percent: float, text: str) -> None:
        from prefect.context import TaskRunContext

        if self.failed or TaskRunContext.get() is None:  # no task run (``task.fn``): no UI to show it in, no API
            return
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        try:
            if state.artifact_id is None:
                key = f"{_slug(self.stage)}-{_slug(phase)}"
                state.artifact_id = create_progress_artifact(percent, key=key, description=text)
            else:
                update_progress_artifact(state.artifact_id, percent, description=text)
        except Exception as exc:  # noqa: BLE001 - progress display must never fail a training stage
            self.failed = True
            self.log(f"progress artifacts are off for this stage ({type(exc).__name__}: {exc})")
