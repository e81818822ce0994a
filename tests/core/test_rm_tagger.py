"""The span-tagger reward model: labels through the alignment's offset mapping, features, training that learns and
resumes exactly, and scoring as a PPO reward source (the stage that trains and registers it: tests/tasks)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from t2g_core.config import RewardModelConfig
from t2g_core.reward_model.tagger import (
    GOOD,
    NEUTRAL,
    POOR,
    TaggerScorer,
    TokenPrediction,
    encode_pair,
    feedback_from_spans,
    missing_from_counts,
    omission_counts,
    shift_features,
    spans_from_classes,
    token_classes,
)
from t2g_core.reward_model.tagger_train import fit_tagger, tagger_examples
from t2g_core.spans import AlignedSpan, align_feedback, labels_for_offsets
from tests.core._rm_rows import ITEMS, lora_bytes, rm_rows
from tests.core._tokenizers import byte_level_bpe

WORDS = st.sampled_from(["Cai", "lives", "in", "Paris", "中文", "😀", "naïve", "3", ",", "."])


@pytest.fixture(scope="module")
def bpe():
    return byte_level_bpe()


@settings(max_examples=80, deadline=None)
@given(words=st.lists(WORDS, min_size=1, max_size=12), labels=st.lists(st.sampled_from([0, 1, 2]), max_size=12))
def test_classes_round_trip_through_the_alignment_offset_mapping(bpe, words, labels):
    """Word spans -> token classes (the alignment's labels_for_offsets) -> char spans -> the same token classes, and
    the same tokens the alignment labels for those spans."""
    response = " ".join(words)
    spans, pos = [], 0
    for word, label in zip(words, labels, strict=False):
        start = response.index(word, pos)
        pos = start + len(word)
        if label:
            spans.append(AlignedSpan(word, "positive" if label == GOOD else "negative", start, pos, "exact", 100.0))
    offsets = [tuple(o) for o in bpe(response, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]
    classes = token_classes(offsets, spans, "poor_wins")
    back = feedback_from_spans(response, spans_from_classes(offsets, classes))
    aligned = align_feedback(response, back)
    assert token_classes(offsets, aligned, "poor_wins") == classes
    signed = labels_for_offsets(offsets, spans)
    assert [{NEUTRAL: 0.0, GOOD: 1.0, POOR: -1.0}[c] for c in classes] == signed
    for start, end, label in back.located:  # the quotes are the located text
        assert response[start:end] in (back.poor_spans if label == "negative" else back.good_spans)


def test_spans_merge_runs_and_skip_zero_width_tokens():
    offsets = [(0, 3), (3, 4), (4, 9), (9, 9), (9, 12), (12, 15)]
    classes = [GOOD, GOOD, NEUTRAL, POOR, POOR, POOR]
    assert spans_from_classes(offsets, classes) == [(0, 4, "positive"), (9, 15, "negative")]
    fb = feedback_from_spans("abcdefghijklmno", spans_from_classes(offsets, classes))
    assert fb.good_spans == ["abcd"] and fb.poor_spans == ["jklmno"] and "jklmno" in fb.critique


def test_shift_features_read_the_models_own_prediction_of_each_token():
    torch.manual_seed(0)
    hidden, logits = torch.randn(2, 5, 4), torch.randn(2, 5, 7)
    ids = torch.randint(0, 7, (2, 5))
    f = shift_features(hidden, logits, ids)  # (B, L, 2d + 2)
    assert f.shape == (2, 5, 10)
    logp = torch.log_softmax(logits, -1)
    for b in range(2):
        for i in range(1, 5):  # plain loop: token i is predicted at position i - 1
            assert torch.allclose(f[b, i, :4], hidden[b, i]) and torch.allclose(f[b, i, 4:8], hidden[b, i - 1])
            assert f[b, i, 8] == pytest.approx(float(logp[b, i - 1, ids[b, i]]), abs=1e-5)
            assert f[b, i, 9] == pytest.approx(float(logp[b, i - 1].max()), abs=1e-5)
        assert torch.all(f[b, 0, 4:] == 0)


def test_over_budget_pairs_keep_the_prompts_end_and_the_responses_start(bpe):
    e = encode_pair(bpe, "The summary says Berlin but the post says Paris.", "Alice moved to Paris in 2019.", 4, 3)
    assert e.truncated and e.start == 4 and len(e.input_ids) == 7 and len(e.offsets) == 3
    assert (
        e.input_ids[:4]
        == bpe("The summary says Berlin but the post says Paris.", add_special_tokens=False)["input_ids"][-4:]
    )


def _tagger_data(tok, n_copies: int = 4):
    cfg = RewardModelConfig(kind="tagger", val_fraction=0.0)
    items = ITEMS * n_copies
    rm_df = rm_rows(tok, cfg, items).assign(id=lambda d: [f"sum-{i}" for i in range(len(d))])
    fb = pd.DataFrame({"id": rm_df["id"], "response": [r for _p, r, *_ in items]})
    return rm_df, fb


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _cfg(**kw) -> RewardModelConfig:
    base = {"kind": "tagger", "finetune": "full", "learning_rate": 3e-3, "batch_size": 4, "save_steps": 5}
    return RewardModelConfig(**{**base, **kw})


def test_a_lora_taggers_adapter_holds_no_embeddings_when_a_pad_was_added(pad_is_eos_dir, tmp_path):
    """As for the generative reward model: the added pad's embedding rows are rebuilt at load, never saved."""
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    rm_df, fb = _tagger_data(AutoTokenizer.from_pretrained(pad_is_eos_dir), 1)
    cfg = _cfg(max_steps=1, finetune="lora")
    result = fit_tagger(cfg, pad_is_eos_dir, tagger_examples(rm_df, fb), tmp_path)
    on_disk, lora, others = lora_bytes(result.adapter_dir / "adapter")
    assert others == [] and 0 < on_disk <= 1.1 * lora, (on_disk, lora)
    scorer = TaggerScorer(result.adapter_dir, cfg)  # loads: the base is resized again from the saved tokenizer
    assert scorer.critique_batch([{"task": "summarization", "prompt": ITEMS[0][0], "response": ITEMS[0][1]}])


@pytest.mark.slow
def test_a_tagger_learns_to_quote_the_wrong_values_and_scores_as_a_reward_source(tiny_model_dir, tok, tmp_path):
    torch.set_num_threads(1)
    rm_df, fb = _tagger_data(tok)
    examples = tagger_examples(rm_df, fb)
    assert json.loads(rm_df["rm_target"][0])["located"]  # the targets carry the located spans
    result = fit_tagger(_cfg(max_steps=60), tiny_model_dir, examples, tmp_path / "run")
    losses = [h["rm/loss"] for h in result.history]
    assert losses[-1] < 0.2 * losses[0]
    scorer = TaggerScorer(result.adapter_dir, _cfg())
    rows = [{"task": "summarization", "prompt": p, "response": r} for p, r, *_ in ITEMS]
    out = scorer.critique_batch(rows)
    for fb_, (_p, _r, _good, poor, _c) in zip(out, ITEMS, strict=True):
        assert [q.strip() for q in fb_.poor_spans] == poor
        assert fb_.ok and fb_.located
    # the untrained tagger does not (the check can fail)
    untrained = fit_tagger(_cfg(max_steps=1, learning_rate=1e-9), tiny_model_dir, examples, tmp_path / "zero")
    out0 = TaggerScorer(untrained.adapter_dir, _cfg()).critique_batch(rows)
    assert [[q.strip() for q in f.poor_spans] for f in out0] != [poor for *_x, poor, _c in ITEMS]


@pytest.mark.slow
def test_a_killed_tagger_run_resumes_to_the_same_weights(tiny_model_dir, tok, tmp_path):
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    rm_df, fb = _tagger_data(tok, 2)
    examples = tagger_examples(rm_df, fb)
    cfg = _cfg(max_steps=12, finetune="lora", learning_rate=1e-2)
    full = fit_tagger(cfg, tiny_model_dir, examples, tmp_path / "full")

    class Killed(Exception):
        pass

    class KillAt:  # a tracker that dies after step 7 (a checkpoint was written at step 5)
        def log_metrics(self, metrics, step=None):
            if step == 7:
                raise Killed

    with pytest.raises(Killed):
        fit_tagger(
            cfg.model_copy(update={"logging_steps": 1}), tiny_model_dir, examples, tmp_path / "cut", tracker=KillAt()
        )
    assert (tmp_path / "cut" / "checkpoints" / "step-5").is_dir()
    resumed = fit_tagger(cfg.model_copy(update={"logging_steps": 1}), tiny_model_dir, examples, tmp_path / "cut")
    assert resumed.resumed_from and resumed.resumed_from.endswith("step-5")
    a, b = (
        load_file(str(full.adapter_dir / "head.safetensors")),
        load_file(str(resumed.adapter_dir / "head.safetensors")),
    )
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert fit_tagger(cfg, tiny_model_dir, examples, tmp_path / "full").train_seconds == full.train_seconds  # reused


@pytest.mark.slow
def test_a_tampered_tagger_checkpoint_is_refused_and_runs_nothing(tiny_model_dir, tok, tmp_path):
    """A ``state.pt`` that would run code when unpickled (here: write a marker file) is refused on resume."""
    from t2g_core.training import UnsafeCheckpoint
    from tests.core._pickles import plant

    rm_df, fb = _tagger_data(tok, 1)
    examples = tagger_examples(rm_df, fb)
    fit_tagger(_cfg(max_steps=7), tiny_model_dir, examples, tmp_path / "run")
    marker = tmp_path / "marker"
    plant(tmp_path / "run" / "checkpoints" / "step-5" / "state.pt", marker)
    with pytest.raises(UnsafeCheckpoint, match="state.pt: refused"):  # a longer run resumes from step 5
        fit_tagger(_cfg(max_steps=9), tiny_model_dir, examples, tmp_path / "run")
    assert not marker.exists()


def test_a_frozen_tagger_trains_its_head_alone_and_saves_no_language_model(tiny_model_dir, tok, tmp_path):
    """finetune=frozen: the base's weights are untouched, the folder holds the head and the tokenizer only, and the
    scorer reads the base itself; a generative reward model cannot be frozen (it would learn nothing)."""
    from safetensors.torch import load_file

    from t2g_core.reward_model.tagger import load_tagger

    torch.set_num_threads(1)
    rm_df, fb = _tagger_data(tok, 2)
    result = fit_tagger(_cfg(max_steps=6, finetune="frozen"), tiny_model_dir, tagger_examples(rm_df, fb), tmp_path)
    folder = result.adapter_dir
    assert not (folder / "lm").exists() and not (folder / "adapter").exists() and (folder / "head.safetensors").exists()
    assert [h["rm/loss"] for h in result.history][-1] < result.history[0]["rm/loss"]  # the head learnt
    state = torch.load(tmp_path / "checkpoints" / "step-5" / "state.pt", weights_only=False)
    trained = state["params"]
    assert trained and all(name.startswith(("head.", "omission.")) for name in trained)  # nothing else trained
    model, _ = load_tagger(folder, device="cpu", dtype=torch.float32)
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    for name, value in model.lm.state_dict().items():
        if name in base:
            torch.testing.assert_close(value, base[name])  # the base, exactly as it was
    rows = [{"task": "summarization", "prompt": p, "response": r} for p, r, *_ in ITEMS]
    assert len(TaggerScorer(folder, _cfg(finetune="frozen")).critique_batch(rows)) == len(ITEMS)
    with pytest.raises(ValueError, match="finetune=frozen trains only a tagger"):
        RewardModelConfig(kind="generative", finetune="frozen")
    refreshable, _ = load_tagger(folder, device="cpu", trainable=True)  # as the critique loop's refresh loads it
    assert not any(p.requires_grad for p in refreshable.lm.parameters())


def test_the_omission_head_leaves_the_span_heads_training_unchanged(tiny_model_dir, tok, tmp_path):
    """Each head's gradient is clipped on its own: with the clip binding at every step, a frozen tagger's span head
    ends the same with or without an omission head beside it (one shared norm let the omission loss shrink the span
    head's steps: on SmolLM2 it cost invented values most of their recall)."""
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    rm_df, fb = _tagger_data(tok, 2)
    heads = {}
    for n in (0, 8):
        cfg = _cfg(max_steps=6, finetune="frozen", tagger_max_omissions=n, max_grad_norm=1e-3, learning_rate=1e-2)
        result = fit_tagger(cfg, tiny_model_dir, tagger_examples(rm_df, fb), tmp_path / str(n))
        heads[n] = load_file(str(result.adapter_dir / "head.safetensors"))
    assert (tmp_path / "8" / "tagger" / "omission.safetensors").exists()
    for name, value in heads[0].items():
        torch.testing.assert_close(heads[8][name], value, rtol=0, atol=1e-7)


def test_a_frozen_taggers_cached_features_give_the_loss_of_the_full_pass(tiny_model_dir, tok):
    """The frozen language model runs once per example; the heads' loss on its cached features is the loss of the
    padded forward pass through the model, gradient included."""
    from t2g_core.reward_model.tagger import build_tagger
    from t2g_core.reward_model.tagger_train import _encode_examples, _Run, cache_features

    torch.set_num_threads(1)
    rm_df, fb = _tagger_data(tok, 1)
    cfg = _cfg(finetune="frozen")
    model, tokenizer = build_tagger(tiny_model_dir, cfg)
    model.eval()  # as the features are cached (the tiny model has no dropout either way)
    data, _ = _encode_examples(tagger_examples(rm_df, fb), tokenizer, cfg, "poor_wins")
    run = _Run(model, None, None, data, 1, "cpu")
    cached = cache_features(model, data, batch_size=3, device="cpu")
    assert [c[0].shape[0] for c in cached] == [len(e.input_ids) - e.start for e, _, _ in data]
    idx = [2, 0, 1]
    full = run.loss(idx)
    full.backward()
    grad = model.head[0].weight.grad.clone()
    model.zero_grad()
    run.cached = cached
    torch.testing.assert_close(run.loss(idx).detach(), full.detach(), rtol=1e-5, atol=1e-6)
    run.loss(idx).backward()
    torch.testing.assert_close(model.head[0].weight.grad, grad, rtol=1e-4, atol=1e-6)


def test_a_frozen_tagger_refines_its_heads_on_cached_features_reproducibly(tiny_model_dir, tok, tmp_path):
    """A critique-loop refresh of a frozen tagger trains its heads alone (on the base's features, computed once per
    example), saves no language model, and the same call gives the same heads."""
    from safetensors.torch import load_file

    from t2g_core.reward_model.tagger_train import refine_tagger

    torch.set_num_threads(1)
    rm_df, fb = _tagger_data(tok, 1)
    examples = tagger_examples(rm_df, fb)
    cfg = _cfg(max_steps=2, finetune="frozen")
    first = fit_tagger(cfg, tiny_model_dir, examples, tmp_path / "fit").adapter_dir
    refined = [refine_tagger(first, examples, tmp_path / name, cfg, steps=3, seed=1).folder for name in "ab"]
    heads = [load_file(str(folder / "head.safetensors")) for folder in refined]
    before = load_file(str(first / "head.safetensors"))
    assert not (tmp_path / "a" / "lm").exists() and not (tmp_path / "a" / "adapter").exists()
    assert any(not torch.equal(before[k], heads[0][k]) for k in before)  # it learnt
    assert all(torch.equal(heads[0][k], heads[1][k]) for k in before)  # reproducibly


# ------------------------------------------------------------------------------------------ omissions and confidence
def test_the_critics_omissions_reach_the_taggers_training_data(tok):
    """The reference critic reports each left-out fact and where it belonged; the annotations, rm_data and the
    tagger's examples keep both (before, the annotations row had no place for them and they were dropped)."""
    from t2g_core.annotators import annotate
    from t2g_core.config import AnnotateConfig
    from t2g_core.critics.reference import ReferenceCritic
    from t2g_core.demo import make_demo_feedback
    from t2g_core.reward_model.data import build_rm_data

    fb = make_demo_feedback("summarization", 40, seed=3)
    annotations = annotate(fb, AnnotateConfig(annotator="reference"), progress=False).frame
    critic = ReferenceCritic()
    expected = {r["id"]: critic.critique(r) for r in annotations_rows(fb)}
    assert sum(len(e.missing) for e in expected.values()) >= 5  # the demo omits clauses
    for row in annotations.itertuples(index=False):
        assert list(row.missing) == list(expected[row.id].missing)
        assert [int(a) for a in row.missing_at] == list(expected[row.id].missing_at)
    rm_df, stats = build_rm_data(fb, annotations, tok, RewardModelConfig(kind="tagger", val_fraction=0))
    assert stats.n_missing == sum(len(e.missing) for e in expected.values())
    examples = {ex.response: ex for ex in tagger_examples(rm_df, fb)}
    for item in fb.itertuples(index=False):
        assert list(examples[item.response].missing_at) == list(expected[item.id].missing_at)


def annotations_rows(fb):
    from t2g_core.annotators import feedback_rows

    return feedback_rows(fb)


def test_annotations_written_before_the_omission_columns_still_read(tmp_path):
    from t2g_core.schemas import ANNOTATIONS
    from t2g_core.store import read_artifact

    old = pd.DataFrame(
        [
            {
                "id": "a",
                "annotator": "reference",
                "critique": "fine",
                "good_spans": ["Gus"],
                "poor_spans": [],
                "reasoning": None,
                "status": "ok",
                "error": None,
                "raw": None,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "latency_s": 0.0,
            }
        ]
    )
    old.to_parquet(tmp_path / "old.parquet")  # no missing / missing_at columns
    frame = read_artifact(tmp_path / "old.parquet", ANNOTATIONS)
    assert list(frame["missing"][0]) == [] and list(frame["missing_at"][0]) == []


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(0, 3), min_size=1, max_size=10))
def test_omission_counts_round_trip_through_char_offsets(bpe, counts):
    """Per-token omission counts -> (missing items, char offsets) -> the same counts; the last token stands for the
    end of the response (zero-width tokens hold no place, so no anchor lands on them)."""
    response = " ".join(["Cai", "lives", "in", "Paris", "with", "3", "dogs", "and", "rests", "."][: len(counts)])
    offsets = [tuple(o) for o in bpe(response, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]
    counts = [n if e > s else 0 for n, (s, e) in zip((counts * len(offsets))[: len(offsets)], offsets, strict=True)]
    items, at = missing_from_counts(response, offsets, counts)
    assert len(items) == len(at) == sum(counts)
    assert omission_counts(offsets, at) == counts
    if counts[-1]:
        assert at[-1] == len(response) and items[-1] == "something required, at the end"


def test_confidence_is_the_probability_of_the_least_sure_tokens_label():
    probs = torch.tensor([[0.9, 0.05, 0.05], [0.2, 0.7, 0.1], [0.1, 0.1, 0.8]])
    omitted = torch.tensor([[0.95, 0.05], [0.99, 0.01], [0.4, 0.6]])
    assert TokenPrediction(probs).confidence == pytest.approx(0.7)
    assert TokenPrediction(probs, omitted).confidence == pytest.approx(0.6)
    assert TokenPrediction(probs, omitted).omissions == [0, 0, 1] and TokenPrediction(probs).omissions == [0, 0, 0]
    assert TokenPrediction(torch.zeros(0, 3)).confidence == 1.0


def test_omissions_are_scored_on_the_token_they_are_anchored_at(bpe):
    from t2g_core.reward_model.evaluate import EvalItem, score_predictions
    from t2g_core.spans import ParsedFeedback

    text = "Cai lives in Paris and rests on Sunday."
    gold = ParsedFeedback("", missing=("job", "food"), missing_at=(text.index(" and"), len(text)))
    hit = ParsedFeedback("", missing=("x",), missing_at=(text.index("and"),))  # the same token as gold's first
    miss = ParsedFeedback("", missing=("x", "y"), missing_at=(0, 0))
    items = [EvalItem("a", "", text, gold), EvalItem("b", "", text, gold)]
    metrics, _ = score_predictions(items, [hit, miss], bpe)
    assert metrics["omission_recall"] == pytest.approx(1 / 4) and metrics["omission_precision"] == pytest.approx(1 / 3)


def test_the_gold_labels_are_scored_against_the_truth_beside_the_model(bpe):
    """``annotator_truth_*`` is the labels' own figure against the truth (what a model matching them would reach):
    here the labels widen the one wrong value by 8 characters and flag an unsupported word the truth does not know."""
    from t2g_core.reward_model.evaluate import EvalItem, score_predictions
    from t2g_core.spans import ParsedFeedback

    text = "Cai, a Roman pilot, lives in Paris."
    wrong = (text.index("Paris"), text.index("Paris") + 5, "negative", "swapped")
    gold = ParsedFeedback("", poor_spans=["lives in Paris", "Roman"])
    exact = ParsedFeedback("", poor_spans=["Paris"])
    metrics, _ = score_predictions([EvalItem("a", "", text, gold, [wrong])], [exact], bpe)
    assert metrics["truth_poor_char_f1"] == 1.0 and metrics["annotator_truth_poor_char_recall"] == 1.0
    assert metrics["annotator_truth_poor_char_precision"] == pytest.approx(5 / (14 + 5))
    assert metrics["annotator_truth_recall_swapped"] == 1.0
    no_truth, _ = score_predictions([EvalItem("a", "", text, gold)], [exact], bpe)
    assert not any(k.startswith("annotator_") for k in no_truth)


@pytest.mark.slow
def test_a_tagger_learns_to_report_omissions(tiny_model_dir, tmp_path):
    """Trained on the reference critic's labels of demo summaries (a clause left out now and then), the tagger's
    omission head finds most left-out clauses of its training items; an untrained one finds none (the check can
    fail)."""
    from t2g_core.reward_model.evaluate import eval_items, evaluate_tagger
    from t2g_core.reward_model.tagger import load_tagger
    from tests.core._taggers import demo_tagger, tagger_cfg

    torch.set_num_threads(1)
    recall = {}
    for steps in (1, 400):
        folder, rm_df, fb = demo_tagger(
            tiny_model_dir, tmp_path / str(steps), n_items=64, steps=steps, finetune="full", learning_rate=3e-3
        )
        model, tok = load_tagger(folder, device="cpu")
        items = eval_items(rm_df.assign(split="validation"), fb, None)
        metrics = evaluate_tagger(model, tok, items, tagger_cfg()).metrics
        recall[steps] = metrics["omission_recall"]
        assert metrics["omission_gold"] >= 10
    assert recall[1] == 0.0 and recall[400] > 0.8, recall
