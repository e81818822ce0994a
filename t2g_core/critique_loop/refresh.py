"""The reward model's refresh: every label the loop gathered on the policy's rollouts, plus a replay of the reward
model's own training data so it keeps what it knew (``replay_ratio`` examples per label)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from t2g_core.config.align import AlignConfig
from t2g_core.policy_prompts import render_policy_prompt
from t2g_core.reward_model.data import annotation_missing
from t2g_core.reward_model.tagger_train import TaggerExample, tagger_examples
from t2g_core.schemas import ANNOTATIONS, FEEDBACK, RM_DATA, validate_frame
from t2g_core.spans import ParsedFeedback, align_feedback
from t2g_core.store import write_parquet
from t2g_core.training import epoch_permutation

LOOP_DIR = "critique_loop"  # the loop's folder in a PPO run folder
REPLAY_RM_DATA, REPLAY_FEEDBACK = "replay_rm_data.parquet", "replay_feedback.parquet"


def write_replay(run_dir: str | Path, rm_df: pd.DataFrame, feedback_df: pd.DataFrame) -> None:
    """Keep the reward model's training rows (and their feedback) in the run folder, for the refresh's replay."""
    folder, train = Path(run_dir) / LOOP_DIR, rm_df[rm_df["split"] == "train"]
    write_parquet(train, folder / REPLAY_RM_DATA, RM_DATA)
    write_parquet(feedback_df[feedback_df["id"].isin(set(train["id"]))], folder / REPLAY_FEEDBACK, FEEDBACK)


def gathered_examples(folders: list[Path], tokenizer, align_cfg: AlignConfig | None) -> list[TaggerExample]:
    """Every ok label in ``folders`` (the rounds' annotated rollouts) as tagger examples."""
    out = []
    for folder in folders:
        items = pd.read_parquet(folder / "feedback.parquet").set_index("id")
        annotations = validate_frame(pd.read_parquet(folder / "annotations.parquet"), ANNOTATIONS, str(folder))
        for a in annotations[annotations["status"] == "ok"].itertuples(index=False):
            item = items.loc[a.id]
            fb = ParsedFeedback(a.critique, list(a.good_spans), list(a.poor_spans))
            spans = [s for s in align_feedback(item.response, fb, align_cfg) if s.start is not None]
            prompt = render_policy_prompt(tokenizer, item.task, item.prompt)
            out.append(TaggerExample(prompt, item.response, spans, tuple(at for _, at in annotation_missing(a))))
    return out


def replay(loop_dir: Path, n_labels: int, ratio: float, seed: int, draw: int) -> list[TaggerExample]:
    """``ratio * n_labels`` examples of the reward model's own training data, drawn anew each round (``draw``)."""
    rm_file, fb_file = loop_dir / REPLAY_RM_DATA, loop_dir / REPLAY_FEEDBACK
    if not rm_file.exists() or not ratio:
        return []
    pool = tagger_examples(pd.read_parquet(rm_file), pd.read_parquet(fb_file))
    n = min(len(pool), round(ratio * n_labels))
    return [pool[i] for i in epoch_permutation(len(pool), seed, 2_000_003 + draw)[:n].tolist()]
