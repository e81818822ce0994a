"""Several span heads on the tagger's shared features (``reward_model.tagger_heads``): the heads start apart, train
on the same loss, save and load; their vote share on a span scales that span's PPO reward (a disputed label pays and
costs less, never more) and draws the critique loop's audit; the evaluation reports the token labels' calibration."""

from __future__ import annotations

import pytest
import torch

from t2g_core.config import AlignConfig
from t2g_core.ppo.scoring import span_labels
from t2g_core.reward_model.evaluate import calibration_error
from t2g_core.reward_model.tagger import TokenPrediction, span_agreement
from t2g_core.spans import ParsedFeedback

TEXT = "Cai lives in Paris now"
OFFSETS = [(0, 3), (3, 9), (9, 12), (12, 18), (18, 22)]  # one token a word, the space before it included


def _labels(weights: tuple[float, ...], span_reward: str = "per_token") -> list[float]:
    located = ((0, 3, "positive"), (12, 18, "negative"))
    fb = ParsedFeedback(critique="c", located=located, located_weights=weights)
    return span_labels(TEXT, OFFSETS, fb, AlignConfig(span_reward=span_reward))[0]


def test_a_label_the_heads_dispute_pays_and_costs_less_and_never_more():
    assert _labels(()) == [1.0, 0.0, 0.0, -1.0, 0.0]  # one head: the labels as they were
    assert _labels((1.0, 0.5)) == [1.0, 0.0, 0.0, -0.5, 0.0]
    assert _labels((0.0, 1.0)) == [0.0, 0.0, 0.0, -1.0, 0.0]
    assert _labels((7.0, -3.0)) == [1.0, 0.0, 0.0, -0.0, 0.0]  # a forged share is clamped into [0, 1]
    assert _labels((1.0, 0.5), "per_span") == [1.0, 0.0, 0.0, -0.5, 0.0]


def test_a_spans_agreement_is_the_mean_vote_share_of_its_tokens_and_confidence_the_least():
    votes = torch.tensor([1.0, 1 / 3, 2 / 3, 1.0, 1.0])
    spans = [(3, 12, "negative"), (18, 22, "positive"), (22, 22, "positive")]
    assert span_agreement(OFFSETS, spans, votes) == pytest.approx((0.5, 1.0, 1.0))
    probs = torch.tensor([[0.9, 0.05, 0.05]] * 5)
    assert TokenPrediction(probs).confidence == pytest.approx(0.9)
    assert TokenPrediction(probs, None, votes).confidence == pytest.approx(1 / 3)  # the audit asks where heads differ


def test_calibration_error_is_zero_when_confidence_matches_accuracy_and_the_gap_otherwise():
    sure = torch.tensor([[0.1, 0.9, 0.0]] * 10)
    assert calibration_error([sure], [[1] * 9 + [0]]) == pytest.approx(0.0, abs=1e-6)
    assert calibration_error([sure], [[1] * 5 + [0] * 5]) == pytest.approx(0.4)
    half = torch.tensor([[0.55, 0.45, 0.0]] * 4)
    assert calibration_error([sure, half], [[1] * 9 + [0], [0, 1, 0, 1]]) == pytest.approx((0 + 4 * 0.05) / 14)


@pytest.mark.slow
def test_an_ensemble_trains_every_head_saves_them_and_scores_with_their_votes(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from t2g_core.reward_model.tagger import TaggerScorer, load_tagger
    from t2g_core.reward_model.tagger_train import fit_tagger, tagger_examples
    from tests.core.test_rm_tagger import ITEMS, _cfg, _tagger_data

    torch.set_num_threads(1)
    rm_df, fb = _tagger_data(AutoTokenizer.from_pretrained(tiny_model_dir), 2)
    cfg = _cfg(max_steps=6, finetune="frozen", tagger_heads=3)
    result = fit_tagger(cfg, tiny_model_dir, tagger_examples(rm_df, fb), tmp_path / "three")
    members = load_file(str(result.adapter_dir / "heads.safetensors"))
    first = load_file(str(result.adapter_dir / "head.safetensors"))
    assert set(members) == {f"{k}.{name}" for k in (0, 1) for name in first}
    assert not torch.equal(members["0.0.weight"], first["0.weight"])  # each head from its own initialisation
    state = torch.load(tmp_path / "three" / "checkpoints" / "step-5" / "state.pt", weights_only=False)["params"]
    start, _ = load_tagger(result.adapter_dir, device="cpu", dtype=torch.float32)
    assert {"members.0.0.weight", "members.1.2.bias"} <= set(state) and len(start.members) == 2  # trained and reloaded

    rows = [{"task": "summarization", "prompt": p, "response": r} for p, r, *_ in ITEMS]
    encoded, preds = TaggerScorer(result.adapter_dir, cfg).predict_batch(rows)
    for p in preds:
        assert p.agreement is not None and {round(3 * v) for v in p.agreement.tolist()} <= {1, 2, 3}  # vote shares
        assert torch.allclose(p.probs.sum(dim=-1), torch.ones(len(p.probs)))
    assert min(float(p.agreement.min()) for p in preds) < 1  # after 6 steps the heads still differ somewhere
    feedback = TaggerScorer(result.adapter_dir, cfg).critique_batch(rows)
    assert all(len(f.located_weights) == len(f.located) for f in feedback)

    one = fit_tagger(_cfg(max_steps=6, finetune="frozen"), tiny_model_dir, tagger_examples(rm_df, fb), tmp_path / "one")
    assert not (one.adapter_dir / "heads.safetensors").exists()
    single = TaggerScorer(one.adapter_dir, cfg).critique_batch(rows)
    assert all(f.located_weights == () for f in single)
