"""Offline review: export the page + sheet, fill verdicts, import them back (the commands: tests/cli)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from t2g_core.config import ValidateConfig
from t2g_core.review import (
    ReviewItem,
    ReviewSample,
    ReviewSpan,
    VerdictError,
    export_review,
    load_sample,
    load_verdicts,
    render_page,
)
from t2g_core.validation import compute_alignment, make_batch, review_sample
from t2g_core.validation.synthetic import make_synthetic_batch

CFG = ValidateConfig()


def _sample(n=12, **kw):
    s = make_synthetic_batch(n_items=n, **kw)
    return review_sample(make_batch(s.annotations, s.spans, s.feedback), CFG.model_copy(update={"sample_size": 8}))


class _Marks(HTMLParser):
    def __init__(self):
        super().__init__()
        self.marks, self._cls, self.radios = [], None, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "mark":
            self._cls = a["class"]
            self.marks.append([a["class"], a["data-spans"], ""])
        if tag == "input" and a.get("type") == "radio":
            self.radios.append((a["name"], a["value"]))

    def handle_endtag(self, tag):
        if tag == "mark":
            self._cls = None

    def handle_data(self, data):
        if self._cls:
            self.marks[-1][2] += data


def test_page_highlights_every_located_span_and_escapes_text():
    item = ReviewItem(
        id="x-1",
        task="qa",
        annotator="a",
        stratum="qa/a/mixed",
        prompt="p",
        critique="<b>bad</b> & wrong",
        response="Use <script>alert(1)</script> then Paris.",
        spans=[
            ReviewSpan(span_index=0, label="negative", text="<script>alert(1)</script>", start=4, end=29),
            ReviewSpan(span_index=1, label="positive", text="Paris", start=35, end=40),
            ReviewSpan(span_index=2, label="positive", text="Lyon", match="unmatched"),
        ],
    )
    html = render_page(ReviewSample(key="k1", seed=0, items=[item]))
    assert "<script>alert(1)" not in html and "&lt;b&gt;bad&lt;/b&gt; &amp; wrong" in html
    parser = _Marks()
    parser.feed(html)
    assert parser.marks == [["poor", "0", "<script>alert(1)</script>"], ["good", "1", "Paris"]]
    assert sorted(parser.radios) == sorted(
        [
            ("i0-s0", "agree"),
            ("i0-s0", "disagree"),
            ("i0-s1", "agree"),
            ("i0-s1", "disagree"),
            ("i0-s2", "agree"),
            ("i0-s2", "disagree"),
            ("i0-c", "acceptable"),
            ("i0-c", "not_acceptable"),
        ]
    )
    assert "not found in the response" in html
    data = json.loads(re.search(r'id="sample-data">(.*?)</script>', html, re.S).group(1))
    assert data["sample_key"] == "k1" and data["n_judgements"] == 4


def test_overlapping_spans_take_the_poor_colour():
    item = ReviewItem(
        id="o",
        task="qa",
        annotator="a",
        stratum="s",
        prompt="p",
        response="abcdefghij",
        spans=[
            ReviewSpan(span_index=0, label="positive", text="abcdef", start=0, end=6),
            ReviewSpan(span_index=1, label="negative", text="defgh", start=3, end=8),
        ],
    )
    parser = _Marks()
    parser.feed(render_page(ReviewSample(key="k", seed=0, items=[item])))
    assert parser.marks == [["good", "0", "abc"], ["poor", "0 1", "def"], ["poor", "1", "gh"]]


def test_export_edit_import_round_trip(tmp_path):
    sample = _sample()
    paths = export_review(sample, tmp_path)
    assert load_sample(tmp_path) == sample
    lines = [json.loads(x) for x in paths["sheet"].read_text().splitlines()]
    assert len(lines) == sample.n_judgements and all(x["agree"] is None for x in lines)
    # a reviewer disagrees with every poor span and every third critique, skips the last line
    for n, x in enumerate(lines[:-1]):
        x["agree"] = not (x["kind"] == "span" and x["label"] == "negative") and not (
            x["kind"] == "critique" and n % 3 == 0
        )
    edited = tmp_path / "filled.jsonl"
    edited.write_text("".join(json.dumps(x) + "\n" for x in lines))
    verdicts = load_verdicts(edited, reviewer="alice")
    res = compute_alignment(sample, verdicts, CFG)
    assert verdicts.reviewer == "alice" and verdicts.sample_key == sample.key
    assert (res.overall.agreed, res.overall.judged) == (sum(x["agree"] is True for x in lines), len(lines) - 1)
    # the JSON file the page downloads has the same format and loads the same way
    page_file = tmp_path / "verdicts.json"
    page_file.write_text(verdicts.model_dump_json())
    assert compute_alignment(sample, load_verdicts(page_file), CFG).overall == res.overall


def test_import_names_the_bad_line(tmp_path):
    sample = _sample()
    paths = export_review(sample, tmp_path)
    lines = paths["sheet"].read_text().splitlines()
    bad = json.loads(lines[2])
    bad["agree"] = "yes"
    lines[2] = json.dumps(bad)
    f = tmp_path / "bad.jsonl"
    f.write_text("\n".join(lines))
    with pytest.raises(VerdictError, match=r"bad.jsonl: line 3: .*'agree'"):
        load_verdicts(f)
    (tmp_path / "bad.json").write_text('{"reviewer": "", "items": []}')
    with pytest.raises(VerdictError, match="reviewer"):
        load_verdicts(tmp_path / "bad.json")
