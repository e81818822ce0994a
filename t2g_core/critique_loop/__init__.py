"""The on-policy critique loop: the reward model audited and refreshed on the policy's own text, as a plug-in of PPO's
trainer (:class:`t2g_core.ppo.hooks.StepHook`) that the PPO stage builds when the loop is on.

The panel, then per due step relabel, alarm and refresh: docs/ppo.md, "The critique loop". Every choice is a function
of the settings and step and the annotator's answers are cached, so a resumed run reproduces the uninterrupted one.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import torch

from t2g_core.config.align import AlignConfig
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.config.ppo import PPOConfig
from t2g_core.config.reward_model import RewardModelConfig
from t2g_core.critique_loop.alarm import gap_test
from t2g_core.critique_loop.audit import agreement, annotate_into, annotation_feedback, choose, feedback_frame
from t2g_core.critique_loop.audit import task_rewards as rewards_of
from t2g_core.critique_loop.refresh import LOOP_DIR, gathered_examples, replay, write_replay
from t2g_core.ppo.hooks import Batch, Decision, Decoded, View
from t2g_core.ppo.rollout import row_dict
from t2g_core.progress import Progress, no_progress
from t2g_core.reward_model.tagger import TaggerScorer
from t2g_core.reward_model.tagger_train import refine_tagger
from t2g_core.spans import ParsedFeedback
from t2g_core.store import write_text_atomic

__all__ = ["LOOP_DIR", "CritiqueLoop", "LoopState", "loop_factory", "write_replay"]
PREFIX = "critique_loop/"


@dataclass
class LoopState:
    """What a PPO checkpoint records of the loop."""

    rounds: int = 0
    tagger: str | None = None  # the reward model PPO scores with (None: the one the run started with)
    certified: list[dict] = field(default_factory=list)  # checkpoint, step, the annotator's mean reward on the panel
    stopped: bool = False
    refreshed: list[dict] = field(default_factory=list)  # one row per refreshed reward model: round, step, folder
    audit: dict = field(default_factory=dict)  # the due step's relabelling metrics, logged after its update


class CritiqueLoop:
    """The loop of one PPO run (docs/ppo.md, "The critique loop")."""

    def __init__(
        self,
        ppo_cfg: PPOConfig,
        annotate_cfg: AnnotateConfig,
        rm_cfg: RewardModelConfig,
        align_cfg: AlignConfig | None,
        run_dir: str | Path,
        reward_model_path: str | Path | None,
        prompts: list[dict],
        *,
        api_key: str | None = None,
        dtype: torch.dtype | None = None,
        progress: Progress = no_progress,
    ):
        self.cfg, self.ppo_cfg = ppo_cfg.critique_loop, ppo_cfg
        self.annotate_cfg, self.rm_cfg, self.align_cfg = annotate_cfg, rm_cfg, align_cfg
        self.dir = Path(run_dir) / LOOP_DIR
        self.start_model = str(reward_model_path) if reward_model_path else None
        self.api_key, self.dtype, self.progress = api_key, dtype, progress
        order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(ppo_cfg.seed + 7_000_003))
        self.panel = [prompts[i] for i in sorted(order[: self.cfg.panel].tolist())]
        self.state = LoopState()

    # ---- the hook interface ----------------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        done, first = step + 1, self.cfg.first or self.cfg.every
        return done >= first and (done - first) % self.cfg.every == 0 and not self.state.stopped

    @property
    def stopped(self) -> bool:
        return self.state.stopped

    def refreshed(self) -> list[dict]:
        return list(self.state.refreshed)

    @property
    def rounds_planned(self) -> int:
        return self.cfg.rounds(self.ppo_cfg.steps)

    def check_source(self, source) -> None:
        """Refresh needs a tagger to fine-tune; auditing works with any reward source."""
        if self.cfg.refresh_steps and not isinstance(source, TaggerScorer):
            raise ValueError(
                "ppo.critique_loop.refresh_steps > 0 fine-tunes the reward model, which must be a tagger "
                "(reward_source=reward_model, reward_model.kind=tagger); this run scores with "
                f"{type(source).__name__}. Set ppo.critique_loop.refresh_steps: 0 to audit only."
            )

    def start(self, view: View) -> Decision:
        """The warm start's panel: its responses, scored by the annotator; the warm start is certified."""
        if self.state.certified:
            return Decision()
        decoded = view.sample(self.panel)
        annotator = self._annotate(self.panel, decoded, "start", self.dir / "start")
        write_text_atomic(self.dir / "start" / "decoded.json", json.dumps(decoded))
        self._certify(view.checkpoint(0), 0, self._panel_reward(decoded, annotator))
        return Decision(save=True)

    def relabel(self, step: int, batch: Batch, view: View) -> list[ParsedFeedback]:
        """Step 1: the chosen rollouts' feedback replaced by the annotator's; the agreement on the random share."""
        t0 = time.perf_counter()
        confidence = [fb.confidence for fb in batch.feedback]
        picked = choose(confidence, self.cfg.budget, self.cfg.uncertain_share, self.ppo_cfg.seed, step)
        labels = self._annotate(batch.rows, batch.decoded, f"{step}", self.folder, picked)
        known = all(c is not None for c in confidence)
        random = set(picked[round(len(picked) * self.cfg.uncertain_share) if known else 0 :])
        ok = [k for k, b in enumerate(picked) if labels[k].ok]
        audit = {"annotated": float(len(ok)), "failed": float(len(picked) - len(ok))}
        shared = [k for k in ok if picked[k] in random]
        if shared:
            rows, annotator = [picked[k] for k in shared], [labels[k] for k in shared]
            decoded, model = [batch.decoded[i] for i in rows], [batch.feedback[i] for i in rows]
            audit |= agreement(decoded, model, annotator, view.tokenizer, self.align_cfg, self.ppo_cfg.omission_penalty)
        self.state.audit = audit | {"annotate_seconds": time.perf_counter() - t0}
        feedback = list(batch.feedback)
        for k in ok:
            feedback[picked[k]] = labels[k]
        return feedback

    def after_step(self, step: int, view: View) -> Decision:
        """Steps 2 and 3 after step ``step``'s update; the round's metrics, as ``critique_loop/*``."""
        t0 = time.perf_counter()
        decoded = view.sample(self.panel)
        annotator = self._annotate(self.panel, decoded, f"panel-{step}", self.folder / "panel")
        start = [
            (t, [tuple(o) for o in offs]) for t, offs in json.loads((self.dir / "start" / "decoded.json").read_text())
        ]
        start_labels = annotation_feedback(pd.read_parquet(self.dir / "start" / "annotations.parquet"))
        pairs = [i for i in range(len(self.panel)) if annotator[i].ok and start_labels[i].ok]
        gaps, start_gaps = (
            self._gaps(view.reward_source, pairs, d, a) for d, a in ((decoded, annotator), (start, start_labels))
        )
        test = gap_test(gaps, start_gaps, self.rounds_planned, self.cfg.alarm_false_rate)
        reward = self._panel_reward(decoded, annotator)
        metrics = self.state.audit | test.metrics() | {"round": float(self.state.rounds), "panel_reward": reward}
        decision = Decision(save=not test.alarm)
        if test.alarm and self.cfg.on_alarm != "continue":
            best = max(self.state.certified, key=lambda c: c["annotator_reward"])
            decision.restore, metrics["rollback"] = best["checkpoint"], float(best["step"])
            self.state.stopped = decision.stop = self.cfg.on_alarm == "stop"
        elif not test.alarm:
            self._certify(view.checkpoint(step + 1), step + 1, reward)
        if self.cfg.refresh_steps and not self.state.stopped:
            decision.reward_source, refreshed = self.refresh(view.reward_source, step)
            metrics |= refreshed
        decision.artifacts.append((self.folder / "annotations.parquet", f"{LOOP_DIR}/{self.folder.name}"))
        self.state.rounds += 1
        metrics["seconds"] = time.perf_counter() - t0 + metrics.pop("annotate_seconds", 0.0)
        self.progress("critique loop", self.state.rounds, self.rounds_planned, {"gap": test.gap, "alarm": test.alarm})
        decision.metrics = {PREFIX + k: v for k, v in metrics.items()}
        return decision

    # ---- the rest ----------------------------------------------------------------------------------------------
    @property
    def folder(self) -> Path:
        """The current round's files: the annotated rollouts, the panel, the refreshed reward model."""
        return self.dir / f"round-{self.state.rounds:03d}"

    def _annotate(self, rows, decoded: Decoded, tag: str, folder: Path, picked=None) -> list[ParsedFeedback]:
        picked = list(range(len(rows))) if picked is None else picked
        items = feedback_frame(rows, [text for text, _ in decoded], tag, picked)
        frame = annotate_into(items, folder, self.annotate_cfg, api_key=self.api_key, cache_dir=self.dir / "cache")
        return annotation_feedback(frame)

    def _gaps(self, source, pairs: list[int], decoded: Decoded, annotator: list[ParsedFeedback]) -> list[float]:
        """Per panel prompt in ``pairs``: what the reward model pays minus what the annotator charges."""
        decoded, annotator = [decoded[i] for i in pairs], [annotator[i] for i in pairs]
        model = source.critique_batch([{**self.panel[i], "response": decoded[k][0]} for k, i in enumerate(pairs)])
        penalty = self.ppo_cfg.omission_penalty
        pay, charge = (rewards_of(decoded, fb, self.align_cfg, penalty) for fb in (model, annotator))
        return [p - c for p, c in zip(pay, charge, strict=True)]

    def _panel_reward(self, decoded: Decoded, annotator: list[ParsedFeedback]) -> float:
        """The annotator's mean reward over the panel responses it could label (-inf: none)."""
        ok = [i for i, fb in enumerate(annotator) if fb.ok]
        penalty = self.ppo_cfg.omission_penalty
        rewards = rewards_of([decoded[i] for i in ok], [annotator[i] for i in ok], self.align_cfg, penalty)
        return statistics.fmean(rewards) if rewards else float("-inf")

    def _certify(self, checkpoint: str, step: int, reward: float) -> None:
        self.state.certified.append({"checkpoint": checkpoint, "step": step, "annotator_reward": reward})

    def reward_source(self):
        """The scorer of the current refreshed reward model (None before the first refresh)."""
        return TaggerScorer(self.state.tagger, self.rm_cfg, dtype=self.dtype) if self.state.tagger else None

    def refresh(self, source, step: int):
        """Step 3: fine-tune the current tagger on every label gathered so far plus the replay; returns the refreshed
        scorer (``source`` itself when nothing was gathered) and the refresh's metrics."""
        folders = [self.dir / f"round-{r:03d}" for r in range(self.state.rounds + 1)]
        done = [f for f in folders if (f / "annotations.parquet").exists()]
        gathered = gathered_examples(done, source.tokenizer, self.align_cfg)
        if not gathered:
            return source, {}
        examples = gathered + replay(
            self.dir, len(gathered), self.cfg.replay_ratio, self.ppo_cfg.seed, self.state.rounds
        )
        result = refine_tagger(
            self.state.tagger or self.start_model,
            examples,
            self.folder / "tagger",
            self.rm_cfg,
            steps=self.cfg.refresh_steps,
            seed=self.ppo_cfg.seed * 7919 + self.state.rounds,
            learning_rate=self.cfg.refresh_learning_rate,
            overlap=self.align_cfg.overlap if self.align_cfg is not None else "poor_wins",
            dtype=self.dtype,
        )
        self.state.tagger = str(result.folder)
        self.state.refreshed.append({"round": self.state.rounds, "step": step, "folder": str(result.folder)})
        return self.reward_source(), {
            "refresh_loss": result.losses[-1] if result.losses else float("nan"),
            "refresh_examples": float(result.n_examples),
            "refresh_seconds": result.seconds,
        }

    def state_dict(self) -> dict:
        return asdict(self.state)

    def load_state_dict(self, state: dict | None):
        known = {k: v for k, v in (state or {}).items() if k in LoopState.__dataclass_fields__}
        self.state = LoopState(**known)
        return self.reward_source()


def loop_factory(*, api_key: str | None, progress: Progress = no_progress):
    """What PPO's run builds its step hook with (``t2g_core.ppo.run.run_from_dir(hook=...)``), once the PPO stage has
    decided the loop is on: the loop of that run, its prompts as the panel's pool, checked against its reward source."""

    def make(settings, run_dir, reward_model_path, prompts: pd.DataFrame, source, dtype) -> CritiqueLoop:
        key = api_key if settings.uses_annotator_key else None
        rows = [row_dict(r) for _, r in prompts.iterrows()]
        args = (settings.ppo, settings.annotate, settings.reward_model, settings.align, run_dir, reward_model_path)
        loop = CritiqueLoop(*args, rows, api_key=key, dtype=dtype, progress=progress)
        loop.check_source(source)
        return loop

    return make
