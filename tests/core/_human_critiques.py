"""Human critiques that only name what is wrong, the common case: the demo's human-style critiques with their praise
of a named value taken out, and a flawless summary's critique "Correct." or "Good, nothing missing." (praise that
quotes no words); no references, no ground truth, as in a user's own file."""

from __future__ import annotations

import re

import pandas as pd

from t2g_core.demo.critiques import FLAWLESS, PRAISE, make_human_feedback

_PRAISE = re.compile("|".join(re.escape(p).replace(r"\{slot\}", ".+?").replace(r"\{value\}", ".+?") for p in PRAISE))
PRAISE_ONLY = ("Correct.", "Good, nothing missing.")


def complaints_only(n_items: int = 30, seed: int = 0) -> pd.DataFrame:
    frame = make_human_feedback(n_items, seed).assign(meta=None)
    said = [" ".join(_PRAISE.sub("", c).split()) for c in frame["critique"]]
    return frame.assign(critique=[PRAISE_ONLY[i % 2] if c in FLAWLESS or not c else c for i, c in enumerate(said)])
