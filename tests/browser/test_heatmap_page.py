"""The token-reward heatmaps in a real headless Chromium: from the index, a step's page says whose reading each row is,
and a rollout the critique loop audited shows the annotator's reading (its reward) above the reward model's it
replaced: "Rome" wrong for one, supported by the other, beside a post that says Paris."""

from __future__ import annotations

import pytest
from chromium_cdp import Browser

from t2g_core.ppo.report import write_heatmap, write_heatmap_index
from tests.core._heatmap_samples import AUDITED, PLAIN

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # drives a Chromium process
GREEN, RED = "rgba(46, 160, 67", "rgba(215, 58, 73"
READINGS = (  # each row: who read it, and the colour of "Rome" in that reading
    "Array.from(document.querySelectorAll('tr')).filter(r => r.querySelector('td.w')).map(r => ({"
    "who: r.querySelector('td.w').innerText, rome: Array.from(r.querySelectorAll('td.r span'))"
    ".filter(s => s.innerText === 'Rome').map(s => getComputedStyle(s).backgroundColor)}))"
)


def test_the_page_says_whose_reading_each_row_is_and_shows_both_where_both_exist(tmp_path, chromium):
    write_heatmap(tmp_path / "heatmaps" / "step-000000.html", 0, [PLAIN, AUDITED], "reward_model")
    index = write_heatmap_index(tmp_path / "heatmaps")
    (tmp_path / "profile").mkdir()
    browser = Browser(chromium, tmp_path / "profile")
    try:
        browser.open(index.as_uri(), tmp_path)
        browser.click("a[href='step-000000.html']")
        browser.wait_for("location.href.endsWith('step-000000.html') && document.readyState === 'complete'")
        rows, text = browser.eval(READINGS), browser.eval("document.body.innerText")
    finally:
        browser.close()
    assert "read by" in text and "not the annotator" in text
    assert [r["who"] for r in rows] == ["reward model", "annotator (critique loop)", "reward model (replaced)"]
    assert [r["rome"][0][: len(GREEN)] for r in rows] == [GREEN, RED, GREEN]
