"""The on-policy critique loop: the reward model audited and refreshed on the policy's own rollouts.

A learned reward model is trained once, on responses the warm start wrote; as PPO moves the policy, its rollouts drift
away from that data and the policy finds what the reward model pays for wrongly (repeated correct clauses, one word
repeated to the token limit). The pipeline already runs a critic that can label any response: the annotator. Every
``every`` steps (``ppo.critique_loop``), after step s:

1. **choose** ``budget`` of step s's rollouts: ``uncertain_share`` of them those the reward model is least sure
   about (``ParsedFeedback.confidence``: the probability of its least sure token's label), the rest drawn at random
   (a generator keyed by (seed, s)); a source without confidence gives all at random;
2. **annotate** them with the pipeline's annotator through :func:`t2g_core.annotators.annotate` (its cache under the
   run folder, statuses, retries); an item that fails is counted and left out;
3. **agree**: the reward model's span F1 and omission recall against the annotator on them
   (:func:`t2g_core.reward_model.evaluate.score_predictions`), and the mean task reward each gives under PPO's
   labelling rules: logged every round as ``critic_loop/*``, the over-optimisation alarm;
4. **alarm**: the poor-span F1 (or, ``alarm_spans=all``, the F1 of all spans) below ``alarm_f1_floor``, or the
   omission recall below ``alarm_omission_floor``, while the annotator's mean reward on the round's rollouts is no
   higher than at the last passing round, or the warm start's as a round on its own rollouts measured it
   (``alarm_gain_margin``: the proxy was followed, the truth did not improve; with a margin z, lower by
   more than z standard errors of the difference of the two means), restores the last
   round that passed (``rollback``: policy, critic, optimizers and KL controller from its checkpoint; the warm start
   before any) or also ends the run (``stop``), or only goes on (``continue``); a round that passes writes the
   checkpoint it will be restored from;
5. **refresh**: the tagger is fine-tuned (``refresh_steps``) on every label the loop has gathered plus a replay of
   its own training data (``replay_ratio`` examples per label), written to ``critique_loop/round-NNN/tagger``, and
   PPO scores with it from the next step on.

Everything is a function of the run's settings and step: the round's rollouts, labels (the annotator's answers are
cached), and refreshed weights (:func:`t2g_core.reward_model.tagger_train.refine_tagger` keeps the process's random
state). The loop's state (rounds done, current reward model, last passing checkpoint, whether it stopped) is part of
each PPO checkpoint and each round's files are written once, so a resumed run reproduces the uninterrupted one.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import torch

from t2g_core.config.align import AlignConfig
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.config.ppo import PPOConfig
from t2g_core.config.reward_model import RewardModelConfig
from t2g_core.feedback import responses_frame
from t2g_core.policy_prompts import render_policy_prompt
from t2g_core.ppo.scoring import label_responses
from t2g_core.progress import Progress, no_progress
from t2g_core.reward_model.data import annotation_missing
from t2g_core.reward_model.evaluate import EvalItem, score_predictions
from t2g_core.reward_model.tagger import TaggerScorer
from t2g_core.reward_model.tagger_train import TaggerExample, refine_tagger, tagger_examples
from t2g_core.schemas import ANNOTATIONS, FEEDBACK, RM_DATA, validate_frame
from t2g_core.spans import ParsedFeedback, align_feedback
from t2g_core.store import write_parquet
from t2g_core.training import epoch_permutation

LOOP_DIR = "critique_loop"
REPLAY_RM_DATA, REPLAY_FEEDBACK = "replay_rm_data.parquet", "replay_feedback.parquet"


@dataclass
class LoopState:
    """What a PPO checkpoint records of the loop."""

    rounds: int = 0
    tagger: str | None = None  # the reward model PPO scores with (None: the one the run started with)
    passed: str | None = None  # checkpoint folder of the last round that passed (None: none written yet)
    passed_reward: float | None = None  # the annotator's mean reward on that round's rollouts (None: no round yet)
    passed_reward_se: float = 0.0  # the standard error of that mean
    stopped: bool = False
    refreshed: list[dict] = field(default_factory=list)  # one row per refreshed reward model: round, step, folder


@dataclass(frozen=True)
class Batch:
    """What a PPO step hands the loop: its rows, decoded responses (text, offsets of the sampled ids) and the reward
    model's feedback on them."""

    rows: list[dict]
    decoded: list[tuple[str, list[tuple[int, int]]]]
    feedback: list[ParsedFeedback]


def choose(confidence: Sequence[float | None], budget: int, uncertain_share: float, seed: int, step: int) -> list[int]:
    """Indices of the rollouts a round annotates: the ``round(budget * uncertain_share)`` least confident (ties by
    index), then the rest at random from the others (a generator keyed by (seed, step)); no confidence: all random."""
    n = len(confidence)
    budget = min(budget, n)
    known = all(c is not None for c in confidence)
    n_unsure = round(budget * uncertain_share) if known else 0
    unsure = sorted(range(n), key=lambda i: (confidence[i], i))[:n_unsure]
    others = [i for i in range(n) if i not in set(unsure)]
    drawn = epoch_permutation(len(others), seed, 1_000_003 + step)[: budget - n_unsure].tolist()
    return unsure + [others[k] for k in drawn]


def feedback_frame(rows: list[dict], texts: list[str], step: int, picked: list[int]) -> pd.DataFrame:
    """The chosen rollouts as feedback items (schema FEEDBACK), ids unique per step and sample."""

    chosen = ((rows[b], f"{rows[b]['id']}@{step}.{b}", texts[b], rows[b].get("meta")) for b in picked)
    return responses_frame(chosen, f"critique loop, step {step}")


def annotation_feedback(annotations: pd.DataFrame) -> list[ParsedFeedback]:
    """The annotator's rows as feedback (quotes, critique, missing items and where each belonged)."""

    out = []
    for a in annotations.itertuples(index=False):
        missing = annotation_missing(a)
        out.append(
            ParsedFeedback(
                a.critique,
                list(a.good_spans),
                list(a.poor_spans),
                status=a.status,
                error=a.error,
                missing=tuple(m for m, _ in missing),
                missing_at=tuple(at for _, at in missing),
            )
        )
    return out


def agreement(
    decoded: list[tuple[str, list[tuple[int, int]]]],
    model_feedback: list[ParsedFeedback],
    annotator_feedback: list[ParsedFeedback],
    tokenizer,
    align_cfg: AlignConfig | None,
    omission_penalty: float,
) -> dict[str, float]:
    """How far the reward model agrees with the annotator on the same responses: span F1 (both labels, and poor
    spans), omission recall and precision, and the mean task reward (labels plus omissions) each gives."""

    pairs = enumerate(zip(decoded, annotator_feedback, strict=True))
    items = [EvalItem(str(i), "", text, gold) for i, ((text, _), gold) in pairs]
    metrics, _ = score_predictions(items, model_feedback, tokenizer, align_cfg=align_cfg)
    rewards = []
    for feedback in (model_feedback, annotator_feedback):
        scored = label_responses(decoded, feedback, align_cfg)
        rewards.append([sum(s.labels) - omission_penalty * len(s.missing_tokens) for s in scored])
    n = max(len(decoded), 1)
    return {
        "f1": metrics["span_f1"],
        "poor_f1": metrics.get("span_negative_f1", 1.0),
        "omission_recall": metrics.get("omission_recall", 1.0),
        "omission_precision": metrics.get("omission_precision", 1.0),
        "rm_reward": sum(rewards[0]) / n,
        "annotator_reward": sum(rewards[1]) / n,
        "annotator_reward_se": statistics.stdev(rewards[1]) / math.sqrt(n) if n > 1 else 0.0,
    }


class CritiqueLoop:
    """The loop of one PPO run (see the module docstring); the trainer calls :meth:`due` and :meth:`round`."""

    def __init__(
        self,
        ppo_cfg: PPOConfig,
        annotate_cfg: AnnotateConfig,
        rm_cfg: RewardModelConfig,
        align_cfg: AlignConfig | None,
        run_dir: str | Path,
        reward_model_path: str | Path | None,
        *,
        api_key: str | None = None,
        dtype: torch.dtype | None = None,
    ):
        self.cfg, self.ppo_cfg = ppo_cfg.critique_loop, ppo_cfg
        self.annotate_cfg, self.rm_cfg, self.align_cfg = annotate_cfg, rm_cfg, align_cfg
        self.dir = Path(run_dir) / LOOP_DIR
        self.start_model = str(reward_model_path) if reward_model_path else None
        self.api_key, self.dtype = api_key, dtype
        self.state = LoopState()

    # ---- when, and the reward source ---------------------------------------------------------------------------
    @property
    def first(self) -> int:
        return self.cfg.first or self.cfg.every

    def due(self, step: int) -> bool:
        done = step + 1
        return done >= self.first and (done - self.first) % self.cfg.every == 0 and not self.state.stopped

    @property
    def rounds_planned(self) -> int:
        steps = self.ppo_cfg.steps
        return 0 if steps < self.first else 1 + (steps - self.first) // self.cfg.every

    def check_source(self, source) -> None:
        """Refresh needs a tagger to fine-tune; auditing works with any reward source."""

        if self.cfg.refresh_steps and not isinstance(source, TaggerScorer):
            raise ValueError(
                "ppo.critique_loop.refresh_steps > 0 fine-tunes the reward model, which must be a tagger "
                "(reward_source=reward_model, reward_model.kind=tagger); this run scores with "
                f"{type(source).__name__}. Set ppo.critique_loop.refresh_steps: 0 to audit only."
            )

    def reward_source(self):
        """The scorer of the current refreshed reward model (None before the first refresh)."""

        return TaggerScorer(self.state.tagger, self.rm_cfg, dtype=self.dtype) if self.state.tagger else None

    # ---- one round ------------------------------------------------------------------------------------------
    def round(self, trainer, step: int, batch: Batch, *, tracker=None, progress: Progress = no_progress) -> dict:
        """Steps 1-5 of the module docstring after step ``step``; returns the ``critic_loop/*`` metrics."""
        t0 = time.perf_counter()
        metrics = self.audit(step, batch, trainer.bundle.tokenizer)
        alarm = bool(metrics["alarm"])
        metrics["rollback"] = float(alarm and self.cfg.on_alarm in ("rollback", "stop"))
        if metrics["rollback"]:
            trainer.restore_weights(self.passed_checkpoint(trainer))
        self.state.stopped = alarm and self.cfg.on_alarm == "stop"
        self._set_bar(step, alarm, metrics)
        if self.cfg.refresh_steps and not self.state.stopped:
            source, refreshed = self.refresh(trainer.reward_source, step)
            trainer.reward_source, metrics = source, metrics | refreshed
        if tracker is not None:
            tracker.log_artifact(self.folder / "annotations.parquet", f"{LOOP_DIR}/{self.folder.name}")
        self.state.rounds += 1
        metrics["seconds"] = time.perf_counter() - t0
        progress(
            "critique loop",
            self.state.rounds,
            self.rounds_planned,
            {"f1": metrics.get("f1", math.nan), "alarm": metrics["alarm"]},
        )
        return {f"critic_loop/{k}": v for k, v in metrics.items()}

    @property
    def folder(self) -> Path:
        """The current round's files: the chosen rollouts, the annotator's labels, the refreshed reward model."""
        return self.dir / f"round-{self.state.rounds:03d}"

    def audit(self, step: int, batch: Batch, tokenizer) -> dict[str, float]:
        """Steps 1-4 of the module docstring: choose, annotate, agree; ``alarm`` is 1.0 when a floor is crossed (a
        round where nothing could be annotated raises none)."""
        t0 = time.perf_counter()
        confidence = [fb.confidence for fb in batch.feedback]
        picked = choose(confidence, self.cfg.budget, self.cfg.uncertain_share, self.ppo_cfg.seed, step)
        annotations = self._annotate(feedback_frame(batch.rows, [t for t, _ in batch.decoded], step, picked))
        ok = [k for k, status in enumerate(annotations["status"]) if status == "ok"]
        metrics = {
            "round": float(self.state.rounds),
            "annotated": float(len(ok)),
            "failed": float(len(picked) - len(ok)),
        }
        metrics["annotate_seconds"] = time.perf_counter() - t0
        if ok:
            labelled = annotation_feedback(annotations)
            metrics |= agreement(
                [batch.decoded[picked[k]] for k in ok],
                [batch.feedback[picked[k]] for k in ok],
                [labelled[k] for k in ok],
                tokenizer,
                self.align_cfg,
                self.ppo_cfg.omission_penalty,
            )
        metrics["alarm"] = float(bool(ok) and self._alarm(metrics))
        return metrics

    def _annotate(self, items: pd.DataFrame) -> pd.DataFrame:
        from t2g_core.annotators import annotate

        run = annotate(items, self.annotate_cfg, api_key=self.api_key, cache_dir=self.dir / "cache", progress=False)
        write_parquet(items, self.folder / "feedback.parquet", FEEDBACK)
        write_parquet(run.frame, self.folder / "annotations.parquet", ANNOTATIONS)
        return run.frame

    def _alarm(self, metrics: dict[str, float]) -> bool:
        low_f1 = metrics["poor_f1" if self.cfg.alarm_spans == "poor" else "f1"] < self.cfg.alarm_f1_floor
        floor = self.cfg.alarm_omission_floor
        low = low_f1 or (floor is not None and metrics["omission_recall"] < floor)
        if self.state.passed_reward is None:  # no earlier round: the floors alone decide
            return low
        # a policy the annotator judges better than at the last passing round (or, with alarm_gain_margin, not worse
        # beyond the noise of two means over a few rollouts) outgrew its reward model: refresh it instead of undoing
        # the progress
        metrics["annotator_gain"] = metrics["annotator_reward"] - self.state.passed_reward
        se = math.hypot(metrics.get("annotator_reward_se", 0.0), self.state.passed_reward_se)
        if self.cfg.alarm_gain_margin is None:
            return low
        metrics["annotator_gain_margin"] = self.cfg.alarm_gain_margin * se
        return low and not metrics["annotator_gain"] > -metrics["annotator_gain_margin"]

    def _set_bar(self, step: int, alarm: bool, metrics: dict[str, float]) -> None:
        """The annotator reward later rounds must beat (the gain check) is that of the policy an alarm restores: the
        last passing round's, or before any passed, the warm start's, which a round after step 0 measures (its
        rollouts are the warm start's) whether or not it passed."""
        if "annotator_reward" in metrics and (not alarm or step == 0):
            self.state.passed_reward = metrics["annotator_reward"]
            self.state.passed_reward_se = metrics["annotator_reward_se"]

    def passed_checkpoint(self, trainer) -> Path:
        """The checkpoint of the last round that passed (the warm start's before any)."""
        path = trainer.run_dir / "checkpoints" / self.state.passed if self.state.passed else None
        if path is None or not (path / "trainer.pt").exists():
            raise FileNotFoundError(f"critique loop: the checkpoint of the last passing round ({path}) is missing")
        return path

    def will_pass(self, checkpoint: Path) -> None:
        """Record ``checkpoint`` (about to be written, with this state in it) as the one an alarm restores."""
        self.state.passed = checkpoint.name

    # ---- refresh --------------------------------------------------------------------------------------------
    def refresh(self, source, step: int):
        """Step 5: fine-tune the current tagger (``source``) on every label gathered so far plus the replay; returns
        the refreshed scorer (``source`` itself when nothing was gathered) and the refresh's metrics."""

        gathered = self.gathered_examples(source.tokenizer)
        if not gathered:
            return source, {}
        examples = gathered + self.replay(source.tokenizer, len(gathered))
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
        metrics = {
            "refresh_loss": result.losses[-1] if result.losses else math.nan,
            "refresh_examples": float(result.n_examples),
            "refresh_seconds": result.seconds,
        }
        return self.reward_source(), metrics

    def gathered_examples(self, tokenizer) -> list:
        """Every ok label of the rounds so far as tagger examples (the policy prompt, the response, the annotator's
        aligned spans and missing anchors)."""

        out = []
        for r in range(self.state.rounds + 1):
            folder = self.dir / f"round-{r:03d}"
            items = pd.read_parquet(folder / "feedback.parquet").set_index("id")
            for a in validate_frame(
                pd.read_parquet(folder / "annotations.parquet"), ANNOTATIONS, str(folder)
            ).itertuples(index=False):
                if a.status != "ok":
                    continue
                item = items.loc[a.id]
                fb = ParsedFeedback(a.critique, list(a.good_spans), list(a.poor_spans))
                spans = [s for s in align_feedback(item.response, fb, self.align_cfg) if s.start is not None]
                prompt = render_policy_prompt(tokenizer, item.task, item.prompt)
                out.append(TaggerExample(prompt, item.response, spans, tuple(at for _, at in annotation_missing(a))))
        return out

    def replay(self, tokenizer, n_labels: int) -> list:
        """``replay_ratio * n_labels`` examples of the reward model's own training data (drawn anew each round)."""

        rm_file, fb_file = self.dir / REPLAY_RM_DATA, self.dir / REPLAY_FEEDBACK
        if not rm_file.exists() or not self.cfg.replay_ratio:
            return []
        pool = tagger_examples(pd.read_parquet(rm_file), pd.read_parquet(fb_file))
        n = min(len(pool), round(self.cfg.replay_ratio * n_labels))
        drawn = epoch_permutation(len(pool), self.ppo_cfg.seed, 2_000_003 + self.state.rounds)[:n].tolist()
        return [pool[i] for i in drawn]

    # ---- checkpoints ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return asdict(self.state)

    def load_state_dict(self, state: dict | None) -> None:
        self.state = LoopState(**state) if state else LoopState()


def write_replay(run_dir: str | Path, rm_df: pd.DataFrame, feedback_df: pd.DataFrame) -> None:
    """Keep the reward model's training rows (and the feedback holding their responses) in the run folder, so a
    refresh can replay them and the run folder needs nothing else."""
    folder = Path(run_dir) / LOOP_DIR
    train = rm_df[rm_df["split"] == "train"]
    write_parquet(train, folder / REPLAY_RM_DATA, RM_DATA)
    write_parquet(feedback_df[feedback_df["id"].isin(set(train["id"]))], folder / REPLAY_FEEDBACK, FEEDBACK)
