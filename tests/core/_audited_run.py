"""A PPO run folder as the critique loop leaves it after auditing step 0: two rollouts of the step recorded with the
reward model's reading (``rollouts.parquet``), one of them also labelled by the annotator
(``critique_loop/round-000``). The reward model calls "Rome" supported beside a post that says Paris."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from t2g_core.feedback import responses_frame
from t2g_core.schemas import ANNOTATIONS, ROLLOUTS
from t2g_core.store import write_parquet

POST = "I am Ada. I live in Paris."
RESPONSE = "Ada lives in Rome."


def audited_run(run_dir: Path) -> Path:
    rows = [{"id": "p0", "task": "summarization", "prompt": POST, "reference": "Ada lives in Paris."}]
    rollouts = [
        {"step": 0, "id": f"p{i}", "prompt": POST, "response": RESPONSE, "critique": "Correct.", "good_spans": ["Rome"],
         "poor_spans": [], "token_rewards": [0.5], "reward": 0.5, "kl": 0.0, "status": "ok", "error": None}
        for i in (0, 1)
    ]  # fmt: skip
    write_parquet(pd.DataFrame(rollouts), run_dir / "rollouts.parquet", ROLLOUTS)
    folder = run_dir / "critique_loop" / "round-000"
    items = responses_frame([(rows[0], "p0@0.1", RESPONSE, None)], "test")
    items.to_parquet(folder.mkdir(parents=True) or folder / "feedback.parquet")
    label = {"id": "p0@0.1", "annotator": "reference", "critique": "The post says Paris, not Rome.", "good_spans": [],
             "poor_spans": ["Rome"], "reasoning": None, "status": "ok", "error": None, "raw": None, "prompt_tokens": 0,
             "completion_tokens": 0, "latency_s": 0.0, "missing": [], "missing_at": []}  # fmt: skip
    write_parquet(pd.DataFrame([label]), folder / "annotations.parquet", ANNOTATIONS)
    return run_dir
