"""The text2grad run form in a real Prefect UI (headless Chromium): the size preset is the first field, a select of
tiny / small / full, and the configuration's sections are titled and shown in the order the stages run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chromium_cdp import Browser
from local_servers import prefect_server

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
STAGE_ORDER = [
    *("1 · Data", "2 · Held-out", "3 · Models", "4 · Annotate", "5 · Align", "6 · Validate"),
    *("7 · Warm-up", "8 · Policy samples", "9 · Reward", "10 · PPO", "11 · Evaluate"),
]
REGISTER = (
    "from flows.text2grad import text2grad\n"
    "d = text2grad.to_deployment(name='text2grad', parameters={'config': {'workspace': {'root': 'ws'}}})\n"
    "print(d.apply())\n"
)


def test_the_form_offers_presets_and_groups_fields_by_stage(tmp_path, chromium):
    with prefect_server(tmp_path) as url:
        env = {**os.environ, "PREFECT_API_URL": f"{url}/api", "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", REGISTER], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        deployment = done.stdout.strip().splitlines()[-1]
        (tmp_path / "profile").mkdir()
        browser = Browser(chromium, tmp_path / "profile", timeout=90)
        try:
            browser.open(f"{url}/deployments/deployment/{deployment}/run", tmp_path)
            browser.wait_for("document.body.innerText.includes('11 · Evaluate')")
            labels = browser.eval(
                "Array.from(document.querySelectorAll('.schema-form-property'))"
                ".map(e => e.querySelector('label, span')?.innerText || '')"
            )
            options = browser.eval(
                "Array.from(document.querySelectorAll('select option')).map(o => o.value || o.textContent)"
            )
            time.sleep(1)
            browser.screenshot(tmp_path / "run-form.png")
        finally:
            browser.close()
    assert labels[0].startswith("preset") and labels[1].startswith("config")
    sections = [next(i for i, text in enumerate(labels) if text.startswith(title)) for title in STAGE_ORDER]
    assert sections == sorted(sections), labels  # the sections in the order the stages run
    assert {"tiny", "small", "full"} <= set(options), options
