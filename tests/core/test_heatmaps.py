"""The token-reward heatmaps say whose reading each row is: PPO's reward source, or the annotator where the critique
loop audited the rollout (its labels became the reward), shown above the reward model's reading it replaced (the
browser's view: tests/browser/test_heatmap_page.py)."""

from __future__ import annotations

import re

from t2g_core.ppo.report import write_heatmap
from tests.core._heatmap_samples import AUDITED, PLAIN


def _who(page: str) -> list[str]:
    return re.findall(r"<td class=w>(.*?)</td>", page)


def test_a_step_page_names_the_reader_of_every_row_and_shows_both_readings_of_an_audited_rollout(tmp_path):
    """Before: a 'critique' column, no word on whose it was (at step 0 the reward model's, calling Rome supported)."""
    page = write_heatmap(tmp_path / "step-000000.html", 0, [PLAIN, AUDITED], "reward_model").read_text()
    assert _who(page) == ["reward model", "annotator (critique loop)", "reward model (replaced)"]
    assert "read by</th>" in page and "not the annotator" in page
    replaced = page.split("reward model (replaced)")[1]
    assert re.search(r'<span style="background:rgba\(46,160,67[^"]*">Rome</span>', replaced)  # its quote, in green
    assert "Correct." in replaced and "The post says Paris, not Rome." in page


def test_a_page_shows_its_first_samples_and_every_audited_one(tmp_path):
    page = write_heatmap(
        tmp_path / "step-000005.html", 5, [PLAIN, PLAIN, AUDITED, PLAIN], "oracle", first=1
    ).read_text()
    assert _who(page) == ["oracle critic", "annotator (critique loop)", "oracle critic (replaced)"]
