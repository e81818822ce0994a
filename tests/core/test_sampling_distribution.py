"""The truncated sampling distribution (temperature, then top-k, then top-p, renormalised): the shipped functions
against transformers' own logits warpers and a plain loop; the chunked log-probs and their gradients; the exact
sampler draws from it and from nothing else."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from t2g_core.ppo.sampling import sample_responses
from t2g_core.rl.logprobs import (
    Sampling,
    removed_tokens,
    selective_logprobs,
    token_entropy,
    token_logprobs,
    truncate_,
)

torch.set_num_threads(1)
SETTINGS = [
    Sampling(temperature=0.7, top_k=5, top_p=1.0),
    Sampling(temperature=1.0, top_k=0, top_p=0.9),
    Sampling(temperature=1.3, top_k=10, top_p=0.8),
    Sampling(temperature=0.5, top_k=3, top_p=0.3),
    Sampling(temperature=1.0, top_k=1, top_p=1.0),
    Sampling(temperature=0.9, top_k=0, top_p=0.05),
]


def _logits(n=40, v=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, v, generator=g) * 2.0


def _warped(logits, s: Sampling):  # transformers' sampling warpers, in the order generate applies them
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    scores = TemperatureLogitsWarper(s.temperature)(None, logits.clone())
    if s.top_k:
        scores = TopKLogitsWarper(s.top_k)(None, scores)
    if s.top_p < 1:
        scores = TopPLogitsWarper(s.top_p)(None, scores)
    return scores


def _loop_distribution(row: list[float], s: Sampling) -> dict[int, float]:
    """The plain twin: sort, keep the top k, then keep tokens while the mass ranked above them is < top_p."""
    z = sorted(((x / s.temperature, i) for i, x in enumerate(row)), reverse=True)
    z = z[: s.top_k] if s.top_k else z
    total = sum(math.exp(v) for v, _ in z)
    kept, above = [], 0.0
    for v, i in z:
        if above >= s.top_p:
            break
        kept.append((v, i))
        above += math.exp(v) / total
    norm = sum(math.exp(v) for v, _ in kept)
    return {i: math.exp(v) / norm for v, i in kept}


@pytest.mark.parametrize("s", SETTINGS)
def test_the_sampling_set_and_log_probs_are_transformers_warpers(s):
    logits = _logits()
    warped = _warped(logits, s)
    assert torch.equal(removed_tokens(logits / s.temperature, s.top_k, s.top_p), torch.isinf(warped))
    ids = torch.stack(
        [torch.multinomial(torch.softmax(w, -1), 1, generator=torch.Generator().manual_seed(1))[0] for w in warped]
    )
    expected = torch.log_softmax(warped, -1).gather(-1, ids[:, None]).squeeze(-1)
    assert torch.allclose(token_logprobs(logits[None], ids[None], s)[0], expected, atol=1e-5)


@pytest.mark.parametrize("s", SETTINGS)
def test_the_sampling_distribution_matches_a_plain_loop(s):
    logits = _logits(n=12, v=20, seed=3)
    v = logits.shape[-1]
    all_ids = torch.arange(v).repeat(logits.shape[0], 1)  # (N, V): every token of every row
    lp = token_logprobs(logits[:, None, :].expand(-1, v, -1), all_ids, s)  # (N, V)
    entropy = token_entropy(logits, s)
    for n, row in enumerate(logits.tolist()):
        dist = _loop_distribution(row, s)
        removed = removed_tokens(logits[n : n + 1] / s.temperature, s.top_k, s.top_p)[0]
        assert set(torch.nonzero(~removed).flatten().tolist()) == set(dist)
        for i, p in dist.items():
            assert float(lp[n, i]) == pytest.approx(math.log(p), abs=1e-5)
        assert float(entropy[n]) == pytest.approx(-sum(p * math.log(p) for p in dist.values()), abs=1e-5)


def test_a_token_outside_the_set_keeps_a_finite_log_prob_in_its_own_position():
    """A recomputed forward may cut a token the sampler drew at the edge of the set: it stays, renormalised with it."""
    logits = _logits(n=1, v=10)
    s = Sampling(temperature=1.0, top_k=2, top_p=1.0)
    outside = int(torch.argsort(logits[0])[0])  # the least likely token
    lp = float(token_logprobs(logits[None], torch.tensor([[outside]]), s))
    top2 = torch.topk(logits[0], 2).values
    assert lp == pytest.approx(float(logits[0, outside] - torch.logsumexp(torch.cat([top2, logits[0, [outside]]]), 0)))
    scores = truncate_(logits.clone(), s, keep=torch.tensor([outside]))
    assert int(torch.isfinite(scores).sum()) == 3


@pytest.mark.parametrize("chunk", [1, 7, 10_000])
@pytest.mark.parametrize(
    "s", [Sampling(temperature=0.7, top_k=20, top_p=0.9), Sampling(temperature=1.0, top_k=0, top_p=0.8)]
)
def test_chunked_truncated_logprobs_equal_the_full_ones_with_gradients(chunk, s):
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 300, bias=False)
    hidden = torch.randn(3, 11, 16, generator=g, requires_grad=True)
    ids = torch.randint(0, 300, (3, 11), generator=g)  # mostly outside the set: the kept-target path
    plain = token_logprobs(head(hidden), ids, s)
    (grad_plain,) = torch.autograd.grad(plain.sum(), hidden)
    chunked = selective_logprobs(hidden, head, ids, s, chunk_tokens=chunk)
    (grad_chunked,) = torch.autograd.grad(chunked.sum(), hidden)
    assert torch.isfinite(chunked).all()
    assert torch.allclose(plain, chunked, atol=1e-5) and torch.allclose(grad_plain, grad_chunked, atol=1e-5)
    untruncated = selective_logprobs(hidden, head, ids, s.temperature, chunk_tokens=chunk)
    assert (chunked > untruncated + 1e-4).any()  # renormalised over the set: the kept tokens gain


class FixedLogits(torch.nn.Module):
    """A stand-in causal LM whose next-token logits are always ``logits`` (V,)."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=True):
        b, length = input_ids.shape
        return SimpleNamespace(logits=self.logits.expand(b, length, -1), past_key_values=None)


@pytest.mark.parametrize(
    "s",
    [
        Sampling(temperature=1.0, top_k=4, top_p=1.0),
        Sampling(temperature=0.8, top_k=0, top_p=0.7),
        Sampling(temperature=1.2, top_k=6, top_p=0.85),
    ],
)
def test_the_exact_sampler_draws_from_the_truncated_distribution_only(s):
    logits = _logits(n=1, v=12, seed=5)[0]
    dist = _loop_distribution(logits.tolist(), s)
    n = 3000
    ids, lp = sample_responses(
        FixedLogits(logits),
        torch.zeros(n, 1, dtype=torch.long),
        torch.ones(n, 1, dtype=torch.bool),
        max_new_tokens=1,
        sampling=s,
        eos_token_id=99,
        pad_token_id=98,
        seeds=list(range(n)),
        return_logprobs=True,
    )
    drawn = ids[:, 0].tolist()
    assert set(drawn) <= set(dist)  # never a token outside the top-k / top-p set
    for tok, lp_tok in zip(drawn, lp[:, 0].tolist(), strict=True):
        assert lp_tok == pytest.approx(math.log(dist[tok]), abs=1e-6)  # the probability it was drawn with
    for tok, p in dist.items():
        assert abs(drawn.count(tok) / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-9
