"""Validation gates fire on crafted bad batches, name the failed checks and worst items, and never crash."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from t2g_core.config import ValidateConfig
from t2g_core.schemas import SchemaError
from t2g_core.validation import check_batch, make_batch, render_markdown, write_report
from t2g_core.validation.checks import labelled_tokens
from t2g_core.validation.synthetic import make_synthetic_batch

CFG = ValidateConfig()


def _report(cfg=CFG, with_feedback=True, **kw):
    s = make_synthetic_batch(**kw)
    b = make_batch(s.annotations, s.spans, s.feedback if with_feedback else None)
    return s, b, check_batch(b, cfg)


def _check(report, name):
    return next(c for c in report.checks if c.name == name)


def test_clean_batch_passes_every_check():
    _, _, report = _report()
    assert [c.name for c in report.checks if c.status != "pass"] == []
    assert report.status == "pass" and report.failures == []
    assert _check(report, "span_f1").value == pytest.approx(1.0)


def test_many_unmatched_spans_fail_the_gate_and_name_the_worst_items():
    s, _, report = _report(unmatched=0.3)
    c = _check(report, "unmatched_rate")
    n_unmatched = int((s.spans["match"] == "unmatched").sum())
    assert c.failed and c.value == pytest.approx(n_unmatched / len(s.spans))
    per_item = s.spans[s.spans["match"] == "unmatched"].groupby("id").size()
    assert [w["id"] for w in c.worst] and all(w["unmatched"] == per_item[w["id"]] for w in c.worst)
    assert c.worst[0]["unmatched"] == per_item.max()
    md = render_markdown(report)
    assert "# Validation report: FAIL" in md and "Worst items: unmatched_rate" in md and c.worst[0]["id"] in md


def test_all_positive_labels_fail_label_balance():
    _, _, report = _report(all_positive=True)
    c = _check(report, "minority_label_frac")
    assert c.failed and c.value == 0.0 and "0 negative" in c.detail
    assert any(f.startswith("minority_label_frac") for f in report.failures)


def test_empty_annotations_fail_without_crashing(tmp_path):
    s = make_synthetic_batch(n_items=3)
    b = make_batch(s.annotations.iloc[:0], s.spans.iloc[:0], s.feedback)
    report = check_batch(b, CFG)
    assert _check(report, "n_items").failed
    assert {c.name for c in report.checks if c.status == "skipped"} >= {
        "unmatched_rate",
        "minority_label_frac",
        "failure_rate",
    }
    paths = write_report(report, tmp_path)
    assert paths["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(paths["json"].read_text(), parse_constant=lambda c: pytest.fail(f"report.json holds {c}"))
    assert data["status"] == "fail" and any(
        c["name"] == "unmatched_rate" and c["value"] is None for c in data["checks"]
    )


def test_failed_annotations_are_counted_by_status():
    _, _, report = _report(failed=0.3)
    c = _check(report, "failure_rate")
    assert c.failed and "api_error" in c.detail and c.worst[0]["status"] == "api_error"


def test_span_f1_gate_uses_ground_truth():
    cfg = CFG.model_copy(update={"min_span_f1": 0.9})
    _, _, report = _report(cfg, flip=0.3)
    c = _check(report, "span_f1")
    assert c.failed and c.value < 0.9 and c.worst[0]["f1"] < 1.0
    _, _, clean = _report(cfg)
    assert not _check(clean, "span_f1").failed


def test_without_feedback_token_and_gold_checks_are_skipped():
    _, _, report = _report(with_feedback=False)
    assert _check(report, "labelled_token_frac").status == "skipped"
    assert _check(report, "span_f1").status == "skipped"
    assert report.status == "pass"


def test_labelled_tokens_counts_words_overlapping_matched_spans():
    spans = pd.DataFrame({"start": [9, None], "end": [14, None]})
    # tokens: Alice | moved | to | Paris | . ; "Paris" is [15, 20), span [9, 14) covers "to" and the end of "moved"
    assert labelled_tokens("Alice moved to Paris.", spans) == (2, 5)
    assert labelled_tokens("Alice moved to Paris.", spans.iloc[:0]) == (0, 5)


def test_dense_labelling_fails_the_upper_token_bound():
    cfg = CFG.model_copy(update={"max_labelled_token_frac": 0.2})
    _, _, report = _report(cfg)
    c = _check(report, "labelled_token_frac")
    assert c.failed and c.value > 0.2 and c.worst[0]["frac"] >= c.worst[-1]["frac"]


def test_breakdown_singles_out_the_bad_annotator():
    good = make_synthetic_batch(n_items=20, annotators=("careful",), id_prefix="a")
    bad = make_synthetic_batch(n_items=20, annotators=("sloppy",), id_prefix="b", unmatched=0.5, seed=1)
    b = make_batch(
        pd.concat([good.annotations, bad.annotations]),
        pd.concat([good.spans, bad.spans]),
        pd.concat([good.feedback, bad.feedback]),
    )
    report = check_batch(b, CFG)
    by = report.by_annotator.set_index("annotator")
    assert by.loc["sloppy", "failing"].startswith("unmatched_rate") and by.loc["careful", "failing"] == "-"
    assert by.loc["careful", "unmatched_rate"] == 0.0 and by.loc["sloppy", "unmatched_rate"] > 0.3
    groups = _check(report, "failing_groups")
    assert groups.failed and [w["group"] for w in groups.worst] == [
        "annotator=sloppy"
    ]  # one task: not a group of its own
    assert not _check(check_batch(b, CFG.model_copy(update={"gate_breakdowns": False})), "failing_groups").failed


def test_bad_input_names_file_and_column():
    s = make_synthetic_batch(n_items=3)
    with pytest.raises(SchemaError, match="spans.*'match'"):
        make_batch(s.annotations, s.spans.assign(match="close enough"), s.feedback)
    fb = s.feedback.copy()
    fb.loc[1, "meta"] = json.dumps({"gold_spans": [{"start": 0, "end": 3, "label": "meh"}]})
    with pytest.raises(SchemaError, match="row 1.*'meta'.*meh"):
        make_batch(s.annotations, s.spans, fb)


def _fast_tokenizer(texts, word_level: bool):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if word_level:
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    else:
        tok = Tokenizer(models.BPE(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(
            vocab_size=260, special_tokens=["[UNK]"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def test_labelled_tokens_can_count_a_tokenizers_tokens():
    s = make_synthetic_batch(n_items=12)
    words = _check(check_batch(make_batch(s.annotations, s.spans, s.feedback), CFG), "labelled_token_frac")
    word_tok = _fast_tokenizer(s.feedback["response"].tolist(), word_level=True)
    same = _check(
        check_batch(make_batch(s.annotations, s.spans, s.feedback, tokenizer=word_tok), CFG), "labelled_token_frac"
    )
    assert same.value == pytest.approx(words.value) and "tokens of" in same.detail  # whitespace/punct split == words
    bpe = _fast_tokenizer(s.feedback["response"].tolist(), word_level=False)
    sub = _check(check_batch(make_batch(s.annotations, s.spans, s.feedback, tokenizer=bpe), CFG), "labelled_token_frac")
    n_tokens = sum(len(bpe(r, add_special_tokens=False)["input_ids"]) for r in s.feedback["response"])
    assert f"of {n_tokens} response tokens of" in sub.detail and sub.value != pytest.approx(words.value)


def _ground_report(feedback: pd.DataFrame):
    from t2g_core.annotators import annotate
    from t2g_core.config import AlignConfig, AnnotateConfig
    from t2g_core.spans import align_frame

    annotations = annotate(feedback, AnnotateConfig(annotator="ground"), progress=False).frame
    return check_batch(make_batch(annotations, align_frame(feedback, annotations, AlignConfig()), feedback), CFG)


def test_human_critiques_that_only_name_what_is_wrong_pass_the_gates_with_ground():
    """``ground`` finds a good span only where a critique quotes the word it praises; critiques that praise without
    quoting ("Correct.", "Good, nothing missing.") give none: only the negative share of the spans is judged, and a
    critique that only praises is not an item the annotator failed to place."""
    from tests.core._human_critiques import PRAISE_ONLY, complaints_only

    feedback = complaints_only(30)
    report = _ground_report(feedback)
    balance = _check(report, "minority_label_frac")
    assert report.status == "pass", report.failures
    assert balance.detail.startswith("0 positive") and "no critique quotes a word it praises" in balance.detail
    mostly_right = feedback.assign(
        critique=[PRAISE_ONLY[i % 2] if i < 18 else c for i, c in enumerate(feedback.critique)]
    )
    no_span = _check(_ground_report(mostly_right), "no_span_rate")
    assert not no_span.failed and "more only praise" in no_span.detail, no_span


def test_a_ground_batch_still_fails_when_its_critiques_name_no_fault():
    from tests.core._human_critiques import complaints_only

    feedback = complaints_only(30)
    praised = feedback.assign(critique=[f"The {r.response.split()[2]} is right." for r in feedback.itertuples()])
    report = _ground_report(praised)
    balance = _check(report, "minority_label_frac")
    assert balance.failed and balance.value == 0.0, balance
    (line,) = [f for f in report.failures if f.startswith("minority_label_frac")]
    assert "validate.min_minority_label_frac" in line and "likely cause: the annotator marks little as wrong" in line


def test_every_failed_gate_names_its_setting_and_likely_cause():
    from t2g_core.validation.checks import GATES

    _, _, clean = _report()
    assert {c.name for c in clean.checks} | {"human_alignment"} == set(GATES)
    for defect, gate in ((dict(unmatched=0.3), "unmatched_rate"), (dict(failed=0.3), "failure_rate")):
        _, _, report = _report(**defect)
        (line,) = [f for f in report.failures if f.startswith(gate)]
        assert f": {GATES[gate][0]}): " in line and f"likely cause: {GATES[gate][1]}" in line, line
