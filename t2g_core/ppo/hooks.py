"""The trainer's one extension point: a plug-in that watches PPO (the critique loop, ``t2g_core.critique_loop``) and
may decide after a step, through a small interface the trainer owns, as TRL's ``TrainerCallback`` does.

On a due step (:meth:`StepHook.due`) the trainer hands the scored batch to :meth:`relabel` before the update and
calls :meth:`after_step` after it, which returns a :class:`Decision`. A hook sees the trainer only through a
:class:`View`; the trainer never reads the hook's state, only stores it in its checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from t2g_core.ppo.scoring import RewardSource
from t2g_core.spans import ParsedFeedback

Decoded = list[tuple[str, list[tuple[int, int]]]]  # each response's text and the char offsets of its sampled ids


@dataclass(frozen=True)
class Batch:
    """A step's rollouts as the hook sees them: the prompt rows, the decoded responses and the reward's feedback."""

    rows: list[dict]
    decoded: Decoded
    feedback: list[ParsedFeedback]


@dataclass(frozen=True)
class View:
    """What a hook may use of the trainer."""

    tokenizer: Any
    reward_source: RewardSource
    sample: Callable[[list[dict]], Decoded]  # the current policy's responses, from fixed streams (the same each call)
    checkpoint: Callable[[int], str]  # the name of the checkpoint holding the policy before step s


@dataclass
class Decision:
    """What the trainer does after a due step."""

    metrics: dict[str, float] = field(default_factory=dict)
    restore: str | None = None  # a checkpoint name: restore its policy, critic, optimizers and KL controller
    reward_source: RewardSource | None = None  # score with this from the next step on
    stop: bool = False
    save: bool = False  # checkpoint the policy after this step (the hook certified it)
    artifacts: list[tuple[Path, str]] = field(default_factory=list)  # files to log: (path, artifact folder)


class StepHook(Protocol):
    def due(self, step: int) -> bool: ...

    def start(self, view: View) -> Decision:
        """Before the first step of a fresh run."""
        ...

    def relabel(self, step: int, batch: Batch, view: View) -> list[ParsedFeedback]: ...

    def after_step(self, step: int, view: View) -> Decision: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict | None) -> RewardSource | None:
        """Restore from a checkpoint; the reward source to score with from there (None: the run's own)."""
        ...

    @property
    def stopped(self) -> bool: ...

    def refreshed(self) -> list[dict]: ...
