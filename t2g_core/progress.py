"""How a long stage says how far it is: ``progress(phase, done, total, metrics)`` after each unit of work.

The library only calls a :class:`Progress`; what the call does belongs to the caller: the command line draws a bar
with the metrics and the time left (:class:`TqdmProgress`), the Prefect layer updates a progress artifact and
writes a log line now and then (``tasks.progress``). A phase is one loop with a known length ("policy
SFT", "reward model", "ppo"); ``done == total`` ends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Progress(Protocol):
    def __call__(self, phase: str, done: int, total: int, metrics: Mapping[str, float] | None = None) -> None: ...


def no_progress(phase: str, done: int, total: int, metrics: Mapping[str, float] | None = None) -> None:
    """Reports nothing (the default)."""
    return None


class TqdmProgress:
    """One tqdm bar per phase (on stderr), showing the phase's metrics, the rate and the time left."""

    def __init__(self, leave: bool = True) -> None:
        self.bars: dict[str, object] = {}
        self.leave = leave

    def __call__(self, phase: str, done: int, total: int, metrics: Mapping[str, float] | None = None) -> None:
        import sys

        from tqdm import tqdm

        bar = self.bars.get(phase)
        if bar is None:
            bar = tqdm(total=total, desc=phase, unit="step", dynamic_ncols=True, file=sys.stderr, leave=self.leave)
            bar.n = bar.last_print_n = max(done - 1, 0)  # a resumed run starts part way
            self.bars[phase] = bar
        bar.total = total
        bar.update(done - bar.n)
        if metrics:
            bar.set_postfix({k: f"{v:.4g}" for k, v in metrics.items()}, refresh=False)
        if done >= total:
            bar.close()
            del self.bars[phase]


def as_progress(value: Progress | bool) -> Progress:
    """``True``: bars on stderr; ``False``: nothing; a :class:`Progress`: itself."""
    if value is True:
        return TqdmProgress(leave=False)
    return value or no_progress
