"""The critique loop with an imperfect annotator: what the loop does when the critic it trusts is wrong.

Imported by the benchmarks that need it (it loads torch through the loop), not by ``testbed`` itself.
"""

from __future__ import annotations

import pandas as pd

from t2g_core.critique_loop import CritiqueLoop
from t2g_core.schemas import ANNOTATIONS
from t2g_core.store import write_parquet
from testbed.devices import add_noise


class NoisyAnnotatorLoop(CritiqueLoop):
    """:class:`~t2g_core.critique_loop.CritiqueLoop` whose annotator flips ``flip`` of its span labels and reports no
    omissions (``testbed.NoisyCritic``'s noise, drawn from the run's seed, the item and the response): the labels it
    returns (the relabelled rollouts' reward, the panel's alarm) and those it writes (what a refresh trains on) are the
    noisy ones. The clean answers stay in the loop's cache; a benchmark's figures stay measured by the ground truth."""

    def __init__(self, *args, flip: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.flip = flip

    def _annotate(self, rows, decoded, tag, folder, picked=None):
        clean = super()._annotate(rows, decoded, tag, folder, picked)
        annotations = pd.read_parquet(folder / "annotations.parquet")
        responses = pd.read_parquet(folder / "feedback.parquet").set_index("id")["response"]
        seed = self.ppo_cfg.seed
        noisy = [
            add_noise(fb, self.flip, f"{seed}\0{i}\0{responses[i]}")
            for i, fb in zip(annotations["id"], clean, strict=True)
        ]
        annotations["good_spans"] = [list(fb.good_spans) for fb in noisy]
        annotations["poor_spans"] = [list(fb.poor_spans) for fb in noisy]
        annotations["missing"] = annotations["missing_at"] = [[] for _ in noisy]
        write_parquet(annotations, folder / "annotations.parquet", ANNOTATIONS)
        return noisy
