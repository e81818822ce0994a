"""The token-reward heatmaps in a real headless Chromium: from the index, a step's page says whose reading each row
is, and the audit of that step shows the reward model's reading beside the annotator's ("Rome" supported by one,
wrong for the other, beside a post that says Paris)."""

from __future__ import annotations

import pytest
from chromium_cdp import Browser, find_chromium

from t2g_core.ppo.report import write_audit_pages, write_heatmap, write_heatmap_index
from tests.core._audited_run import POST, RESPONSE, audited_run

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # drives a Chromium process
GREEN, RED = "rgba(46, 160, 67", "rgba(215, 58, 73"
READINGS = (  # each row: who read it, and the colour of "Rome" in that reading
    "Array.from(document.querySelectorAll('tr')).filter(r => r.querySelector('td.w')).map(r => ({"
    "who: r.querySelector('td.w').innerText, rome: Array.from(r.querySelectorAll('td.r span'))"
    ".filter(s => s.innerText === 'Rome').map(s => getComputedStyle(s).backgroundColor)}))"
)


def test_the_pages_say_whose_reading_each_row_is_and_show_both_where_both_exist(tmp_path):
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("headless Chromium not installed (Debian: apt-get install -y chromium)")
    run = audited_run(tmp_path / "run")
    sample = {"prompt": POST, "text": RESPONSE, "offsets": [(0, 13), (13, 17), (17, 18)], "rewards": [0, 1.0, 0],
              "critique": "Correct.", "status": "ok", "error": None}  # fmt: skip
    write_heatmap(run / "heatmaps" / "step-000000.html", 0, [sample], reader="reward_model")
    write_audit_pages(run / "critique_loop", run / "rollouts.parquet", run / "heatmaps")
    index = write_heatmap_index(run / "heatmaps")
    (tmp_path / "profile").mkdir()
    browser = Browser(chromium, tmp_path / "profile")
    try:
        browser.open(index.as_uri(), tmp_path)
        browser.click("a[href='step-000000.html']")
        browser.wait_for("location.href.endsWith('step-000000.html')")
        browser.wait_for("document.readyState === 'complete'")
        step_rows, step_text = browser.eval(READINGS), browser.eval("document.body.innerText")
        browser.eval("history.back()")
        browser.wait_for("location.href.endsWith('index.html')")
        browser.click("a[href='audit-step-000000.html']")
        browser.wait_for("location.href.endsWith('audit-step-000000.html')")
        browser.wait_for("document.readyState === 'complete'")
        audit_rows = browser.eval(READINGS)
    finally:
        browser.close()
    assert "read by" in step_text and "not the annotator" in step_text
    assert [r["who"] for r in step_rows] == ["reward model"] and step_rows[0]["rome"][0].startswith(GREEN)
    assert [r["who"] for r in audit_rows] == ["reward model", "annotator (reference)"]
    assert audit_rows[0]["rome"][0].startswith(GREEN) and audit_rows[1]["rome"][0].startswith(RED)
