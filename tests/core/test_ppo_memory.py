"""Memory-saving passes compute the same numbers: chunked log-probs, micro-batched old/ref/value passes, gradient
checkpointing."""

from __future__ import annotations

import pytest
import torch

from t2g_core.config.lora import LoRA
from t2g_core.ppo.models import forward_in_micro_batches, load_policy
from t2g_core.rl.logprobs import selective_logprobs, token_logprobs

torch.set_num_threads(1)


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_chunked_logprobs_equal_the_full_log_softmax_with_gradients(chunk):
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 300, bias=False)
    hidden = torch.randn(3, 11, 16, generator=g, requires_grad=True)
    ids = torch.randint(0, 300, (3, 11), generator=g)
    plain = token_logprobs(head(hidden), ids, 0.7)  # the plain twin: (B, T, V) logits, float32 log-softmax
    (grad_plain,) = torch.autograd.grad(plain.sum(), hidden)
    chunked = selective_logprobs(hidden, head, ids, 0.7, chunk_tokens=chunk)
    (grad_chunked,) = torch.autograd.grad(chunked.sum(), hidden)
    assert torch.allclose(plain, chunked, atol=1e-5) and torch.allclose(grad_plain, grad_chunked, atol=1e-5)


def test_chunked_logprobs_of_bfloat16_logits_are_float32():
    head = torch.nn.Linear(8, 50, bias=False).to(torch.bfloat16)
    hidden = torch.randn(2, 5, 8, dtype=torch.bfloat16)
    ids = torch.randint(0, 50, (2, 5))
    out = selective_logprobs(hidden, head, ids, 1.0, chunk_tokens=3)
    assert out.dtype == torch.float32
    assert torch.allclose(out, token_logprobs(head(hidden), ids), atol=1e-6)


def _batch(bundle, n=5):
    g = torch.Generator().manual_seed(1)
    q = torch.randint(5, 200, (n, 9), generator=g)
    qm = torch.ones_like(q, dtype=torch.bool)
    qm[1, :3] = qm[3, :5] = False  # left padding
    q[~qm] = bundle.tokenizer.pad_token_id
    r = torch.randint(5, 200, (n, 6), generator=g)
    rm = torch.ones_like(r, dtype=torch.bool)
    rm[2, 4:] = False
    return q, qm, r, rm


@pytest.mark.parametrize("value_model", ["head", "separate", "lora"])
def test_micro_batched_passes_equal_the_single_pass(tiny_model_dir, value_model):
    bundle = load_policy(tiny_model_dir, lora=LoRA(r=4, alpha=8), value_model=value_model, seed=0)
    torch.nn.init.normal_(bundle.value.head.weight, std=0.1)
    for p in bundle.policy.parameters():  # a policy away from the reference, so the two passes differ
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.05)
    batch = _batch(bundle)
    whole_lp, whole_v = forward_in_micro_batches(bundle.model, *batch, 0.8, micro_batch_size=None)
    ref_whole, _ = forward_in_micro_batches(bundle.model, *batch, 0.8, micro_batch_size=None, reference=True)
    assert not torch.allclose(whole_lp, ref_whole, atol=1e-3)
    for size in (1, 2, 4):
        lp, v = forward_in_micro_batches(bundle.model, *batch, 0.8, micro_batch_size=size)
        ref, none = forward_in_micro_batches(bundle.model, *batch, 0.8, micro_batch_size=size, reference=True)
        assert none is None
        assert torch.allclose(lp, whole_lp, atol=1e-5) and torch.allclose(v, whole_v, atol=1e-5), size
        assert torch.allclose(ref, ref_whole, atol=1e-5), size


def test_gradient_checkpointing_recomputes_the_layers_and_gives_the_same_gradients(tiny_model_dir):
    from transformers.modeling_layers import GradientCheckpointingLayer

    grads, calls = {}, {}
    for on in (False, True):
        bundle = load_policy(
            tiny_model_dir,
            lora=LoRA(r=4, alpha=8),
            value_model="head",
            seed=0,
            gradient_checkpointing=on,
        )
        torch.nn.init.normal_(bundle.value.head.weight, std=0.1)
        layer = next(m for m in bundle.policy.modules() if isinstance(m, GradientCheckpointingLayer))
        count = [0]  # calls of a module inside the layer (transformers checkpoints the layer's forward, not its hooks)
        layer.mlp.register_forward_pre_hook(lambda *_, c=count: c.__setitem__(0, c[0] + 1))
        lp, v = bundle.model(*_batch(bundle), 0.8)
        (lp.sum() + v.sum()).backward()
        calls[on] = count[0]
        grads[on] = [p.grad.clone() for p in bundle.policy.parameters() if p.requires_grad]
        assert all(not m.training for m in bundle.policy.modules())  # back in eval mode: dropout stays off
    assert calls == {False: 1, True: 2}  # the checkpointed layer ran again in the backward pass
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads[False], grads[True], strict=True))


def test_logit_softcapping_is_applied_after_the_head(tiny_model_dir):
    """Gemma-2/3 cap their logits in the LM's forward; the chunked pass reads the head itself, so it caps them too."""
    bundle = load_policy(tiny_model_dir, lora=LoRA(r=4, alpha=8), value_model="head", seed=0)
    q, qm, r, rm = _batch(bundle)
    lm = bundle.model.causal_lm
    lm.config.final_logit_softcapping = 0.5  # tight enough to change every distribution
    with torch.no_grad():
        got, _ = bundle.model(q, qm, r, rm, 0.8)
        ids, attn = torch.cat([q, r], 1), torch.cat([qm, rm], 1).long()
        from t2g_core.rl.logprobs import position_ids_from_mask

        logits = lm(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn)).logits
        capped = torch.tanh(logits / 0.5) * 0.5
        expected = token_logprobs(capped[:, q.shape[1] - 1 : -1], r, 0.8)
        uncapped = token_logprobs(logits[:, q.shape[1] - 1 : -1], r, 0.8)
    assert torch.allclose(got, expected, atol=1e-5) and not torch.allclose(got, uncapped, atol=1e-3)
