"""The offline review page in a real headless Chromium: spans are highlighted, and clicking the choices and the
download button produces the expected verdict file, which `load_verdicts` reads back.

Needs a Chromium binary (Debian: ``apt-get install -y chromium``); skipped with that message when none is found.
"""

from __future__ import annotations

import time

import pytest
from chromium_cdp import Browser, find_chromium

from t2g_core.config import ValidateConfig
from t2g_core.review import ItemVerdict, ReviewVerdicts, SpanJudgement, export_review, load_verdicts
from t2g_core.validation import compute_alignment, make_batch, review_sample
from t2g_core.validation.synthetic import make_synthetic_batch

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # drives a Chromium process
CHROMIUM = find_chromium()
COLOURS = {"good": "rgb(183, 228, 199)", "poor": "rgb(244, 166, 166)"}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("headless Chromium not installed (Debian: apt-get install -y chromium)")
    tmp = tmp_path_factory.mktemp("review")
    s = make_synthetic_batch(n_items=12, unmatched=0.15, seed=2)
    cfg = ValidateConfig(sample_size=5)
    sample = review_sample(make_batch(s.annotations, s.spans, s.feedback), cfg)
    paths = export_review(sample, tmp / "export")
    (tmp / "profile").mkdir()
    (tmp / "downloads").mkdir()
    browser = Browser(CHROMIUM, tmp / "profile")
    try:
        browser.open(paths["page"].as_uri(), tmp / "downloads")
        yield browser, sample, tmp / "downloads", cfg
    finally:
        browser.close()


def test_spans_are_highlighted_in_colour(page):
    browser, sample, _, _ = page
    marks = browser.eval(
        "Array.from(document.querySelectorAll('.item')).map(it => ({id: it.dataset.id, marks: Array.from("
        "it.querySelectorAll('.response mark')).map(m => ({cls: m.className, spans: m.dataset.spans, text: "
        "m.textContent,"
        " bg: getComputedStyle(m).backgroundColor}))}))"
    )
    assert [m["id"] for m in marks] == [it.id for it in sample.items]
    for item, shown in zip(sample.items, marks, strict=True):
        located = [sp for sp in item.spans if sp.start is not None]
        expected = sorted(located, key=lambda sp: sp.start)  # synthetic spans never overlap: one mark per span
        assert [m["text"] for m in shown["marks"]] == [sp.text for sp in expected]
        assert [m["cls"] for m in shown["marks"]] == ["good" if sp.label == "positive" else "poor" for sp in expected]
        assert all(m["bg"] == COLOURS[m["cls"]] for m in shown["marks"])
    assert any(sp.start is None for it in sample.items for sp in it.spans), "the sample should show an unmatched span"
    assert browser.eval("document.querySelectorAll('.unmatched').length") >= 1


def _plan(sample) -> ReviewVerdicts:
    """What the test clicks: item 0 all agree + acceptable; item 1 first span disagree + not acceptable; item 2 one
    span."""
    items = []
    for n, it in enumerate(sample.items[:3]):
        if n == 2:
            spans = [SpanJudgement(span_index=it.spans[0].span_index, agree=True, text=it.spans[0].text)]
            crit = None
        else:
            spans = [
                SpanJudgement(span_index=sp.span_index, agree=not (n == 1 and k == 0), text=sp.text)
                for k, sp in enumerate(it.spans)
            ]
            crit = n == 0
        items.append(
            ItemVerdict(id=it.id, spans=spans, critique_acceptable=crit, comment="typo in span 0" if n == 1 else "")
        )
    return ReviewVerdicts(reviewer="Ada Reviewer", sample_key=sample.key, items=items)


def test_clicking_choices_downloads_the_expected_verdicts(page):
    browser, sample, downloads, cfg = page
    plan = _plan(sample)
    browser.type_text("#reviewer", plan.reviewer)
    for n, v in enumerate(plan.items):
        for j in v.spans:
            browser.click(f'input[name="i{n}-s{j.span_index}"][value="{"agree" if j.agree else "disagree"}"]')
        if v.critique_acceptable is not None:
            browser.click(
                f'input[name="i{n}-c"][value="{"acceptable" if v.critique_acceptable else "not_acceptable"}"]'
            )
        if v.comment:
            browser.type_text(f"#note-{n}", v.comment)
    made = sum(len(v.spans) + (v.critique_acceptable is not None) for v in plan.items)
    assert (
        browser.eval("document.getElementById('progress').textContent")
        == f"{made} of {sample.n_judgements} judgements made"
    )
    browser.click("#download")
    target = downloads / f"verdicts-{sample.key}.json"
    deadline = time.monotonic() + 20
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert target.exists(), f"no download; files: {list(downloads.iterdir())}"
    got = load_verdicts(target)
    assert got == plan
    res = compute_alignment(sample, got, cfg)
    assert res.overall.judged == made and res.overall.agreed == made - 2
