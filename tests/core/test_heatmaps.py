"""The token-reward heatmaps say whose reading each row is: a step's page shows PPO's reward source; where the
critique loop audited a step, a page shows the reward model's reading beside the annotator's (the browser's view:
tests/browser/test_heatmap_page.py)."""

from __future__ import annotations

import re

from t2g_core.ppo.report import write_audit_pages, write_heatmap, write_heatmap_index
from tests.core._audited_run import RESPONSE, audited_run

SAMPLE = {"prompt": "post", "text": "Ada lives in Rome.", "offsets": [(0, 3), (3, 9)], "rewards": [0.0, 1.0],
          "critique": "Correct.", "status": "ok", "error": None}  # fmt: skip


def _cells(page: str, cls: str) -> list[str]:
    return re.findall(rf"<td class={cls}>(.*?)</td>", page)


def test_a_step_page_names_the_reader_of_every_row(tmp_path):
    """Before: a 'critique' column, no word on whose it was (the reward model's, at step 0 wrong)."""
    page = write_heatmap(tmp_path / "step-000000.html", 0, [SAMPLE, SAMPLE], reader="reward_model").read_text()
    assert _cells(page, "w") == ["reward model", "reward model"]
    assert "read by</th>" in page and "not the annotator" in page


def test_an_audited_step_shows_the_reward_model_beside_the_annotator(tmp_path):
    run = audited_run(tmp_path / "run")
    (page,) = write_audit_pages(run / "critique_loop", run / "rollouts.parquet", run / "heatmaps")
    html = page.read_text()
    assert page.name == "audit-step-000000.html"
    assert _cells(html, "w") == ["reward model", "annotator (reference)"]  # the audited rollout only, read twice
    good, poor = re.findall(r'<span style="background:([^"]+)">Rome</span>', html)
    assert good.startswith("rgba(46,160,67") and poor.startswith("rgba(215,58,73")  # supported, then wrong
    assert "The post says Paris, not Rome." in html and html.count(RESPONSE.removesuffix("Rome.")) == 2
    index = write_heatmap_index(run / "heatmaps").read_text()
    assert 'href="audit-step-000000.html"' in index


def test_an_audited_step_the_rollouts_table_skipped_says_so(tmp_path):
    run = audited_run(tmp_path / "run")
    (run / "rollouts.parquet").unlink()  # ppo.log_every kept no rollouts of this step
    (page,) = write_audit_pages(run / "critique_loop", run / "rollouts.parquet", run / "heatmaps")
    assert "not recorded" in page.read_text()
