"""What a PPO step costs, and that the savings change nothing: the passes a step skips leave the update bit-identical,
only the actor is snapshotted and only while the KL early stop can fire, the LoRA critic holds no second copy of the
base weights, and the early stop pulls an update back onto the bound (the first) or undoes it (a later one)."""

from __future__ import annotations

import pytest
import torch

import t2g_core.ppo.trainer as trainer_module
import t2g_core.ppo.update as update_module
from t2g_core.config.lora import LoRA
from t2g_core.ppo import CriticSource, PPOTrainer
from t2g_core.ppo.models import CRITIC_ADAPTER, ActorCritic, load_policy
from t2g_core.rl.logprobs import selective_logprobs, selective_logprobs_and_entropy, token_entropy
from tests.core.test_ppo_trainer import EdgeWordsCritic, _cfg, _prompts

torch.set_num_threads(1)


def _trainer(tiny_model_dir, folder, **kw) -> PPOTrainer:
    return PPOTrainer(_cfg(**kw), tiny_model_dir, _prompts(), folder, reward_source=CriticSource(EdgeWordsCritic()))


def _weights(trainer: PPOTrainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.actor.params + (trainer.critic.params if trainer.critic else [])]


@pytest.fixture
def forwards(monkeypatch):
    """Every ActorCritic forward of the test: (with gradients, reference, with values)."""
    calls: list[tuple[bool, bool, bool]] = []
    original = ActorCritic.forward

    def counted(self, *args, reference=False, with_values=True, with_entropy=False):
        calls.append((torch.is_grad_enabled(), reference, with_values))
        return original(self, *args, reference=reference, with_values=with_values, with_entropy=with_entropy)

    monkeypatch.setattr(ActorCritic, "forward", counted)
    return calls


class Probe:
    """Keeps the arguments of the update's last minibatch pass, so a test can measure the policy's KL afterwards."""

    def __init__(self, monkeypatch):
        self.passes: list[dict] = []  # per minibatch pass: its statistics and the actor's weights it saw
        original = update_module.minibatch_grads

        def grads(runtime, model, ro, exp, rows, cfg, first=None):
            self.args, self.cfg = (runtime, model, ro, exp), cfg
            stats = original(runtime, model, ro, exp, rows, cfg, first)
            weights = [p.detach().clone() for p in model.policy.parameters() if p.requires_grad]
            self.passes.append(stats | {"weights": weights})
            return stats

        monkeypatch.setattr(update_module, "minibatch_grads", grads)

    def whole_batch_kl(self) -> float:
        runtime, model, ro, exp = self.args
        return update_module.approx_kl_now(runtime, model, ro, exp, list(range(len(ro.global_index))), self.cfg)


# ---- no forwards that change nothing --------------------------------------------------------------------------
@pytest.mark.parametrize("value_model", ["head", "lora"])
def test_one_epoch_of_one_minibatch_trains_on_its_old_log_prob_pass_bit_for_bit(
    tiny_model_dir, tmp_path, monkeypatch, forwards, value_model
):
    kw = dict(steps=2, ppo_epochs=1, minibatches=1, value_model=value_model, max_approx_kl=None)
    reused = _trainer(tiny_model_dir, tmp_path / "reused", **kw)
    reused_history = [reused.step(s) for s in range(2)]
    reused_calls = list(forwards)
    monkeypatch.setattr(trainer_module, "reuses_first_forward", lambda cfg: False)
    forwards.clear()
    separate = _trainer(tiny_model_dir, tmp_path / "separate", **kw)
    separate_history = [separate.step(s) for s in range(2)]
    # per step: the training forward and the reference pass, against a no-grad old-log-prob pass besides them
    assert reused_calls == [(True, False, True), (False, True, True)] * 2
    assert sorted(forwards) == sorted([(False, False, True), (False, True, True), (True, False, True)] * 2)
    for a, b in zip(_weights(reused), _weights(separate), strict=True):
        assert torch.equal(a, b)  # the same arithmetic: the same update, bit for bit
    assert any(float(p.abs().max()) > 0 for p in _weights(reused))  # and the update did move the weights
    for h_reused, h_separate in zip(reused_history, separate_history, strict=True):
        assert h_reused["ppo/first_ratio"] == 1.0 and h_reused["loss/policy"] == h_separate["loss/policy"]
        assert h_reused["policy/entropy"] == pytest.approx(h_separate["policy/entropy"], rel=1e-6)


def test_the_kl_check_forward_and_the_snapshot_exist_only_while_the_early_stop_can_fire(
    tiny_model_dir, tmp_path, forwards
):
    """One step of critic warm-up (the stop cannot fire), one of training: the stop off vs a bound it never reaches."""
    kw = dict(steps=2, ppo_epochs=2, minibatches=2, critic_warmup_steps=1)
    runs = {}
    for bound in (None, 1e6):
        forwards.clear()
        trainer = _trainer(tiny_model_dir, tmp_path / str(bound), max_approx_kl=bound, **kw)
        history = [trainer.step(s) for s in range(2)]
        checks = [c for c in forwards if c == (False, False, False)]  # a no-grad policy pass without values
        runs[bound] = (trainer, history, len(checks))
    off, on = runs[None], runs[1e6]
    assert off[2] == 0 and on[2] == 1  # the check after the last update of the step that trains the actor
    assert off[0].actor.snapshot is None and on[0].actor.snapshot is not None
    for a, b in zip(_weights(off[0]), _weights(on[0]), strict=True):
        assert torch.equal(a, b)
    assert [h["ppo/updates"] for h in off[1]] == [h["ppo/updates"] for h in on[1]] == [0.0, 4.0]


def test_entropy_is_read_off_the_log_probs_logits_in_one_head_pass(tiny_model_dir):
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 300, bias=False)
    hidden = torch.randn(3, 11, 16, generator=g)
    ids = torch.randint(0, 300, (3, 11), generator=g)
    logprobs, entropy = selective_logprobs_and_entropy(hidden, head, ids, 0.7, chunk_tokens=7)
    assert torch.equal(logprobs, selective_logprobs(hidden, head, ids, 0.7, chunk_tokens=7))
    assert torch.allclose(entropy, token_entropy(head(hidden), 0.7), atol=1e-5)  # the plain (B, T, V) twin

    bundle = load_policy(tiny_model_dir, lora=LoRA(r=4, alpha=8), value_model="head", seed=0)
    bundle.model.chunk_tokens = 4
    calls = []
    bundle.model.causal_lm.get_output_embeddings().register_forward_hook(lambda *_: calls.append(1))
    q, r = torch.randint(5, 200, (2, 5), generator=g), torch.randint(5, 200, (2, 6), generator=g)
    ones = torch.ones_like(r, dtype=torch.bool)
    with torch.no_grad():
        bundle.model(q, torch.ones_like(q, dtype=torch.bool), r, ones, 0.8, with_entropy=True)
    assert len(calls) == 3  # 12 positions in chunks of 4: each chunk through the head once, entropy included


# ---- snapshots only of what can be undone ------------------------------------------------------------------
@pytest.mark.parametrize("value_model", ["head", "separate", "lora"])
def test_only_the_actor_is_snapshotted_and_the_snapshot_holds_its_weights_and_moments(
    tiny_model_dir, tmp_path, value_model
):
    trainer = _trainer(tiny_model_dir, tmp_path / "on", steps=1, ppo_epochs=2, minibatches=1, max_approx_kl=1e6)
    trainer.step(0)
    params = trainer.actor.params
    n = sum(p.numel() for p in params)
    # a float32 copy of every actor weight and of AdamW's two moments, and one float32 step count per tensor
    assert trainer.actor.snapshot_bytes == 3 * 4 * n + 4 * len(params)
    assert trainer.critic.snapshot is None and trainer.critic.snapshot_bytes == 0
    critic_bytes = 3 * 4 * sum(p.numel() for p in trainer.critic.params)
    print(
        f"{value_model}: actor snapshot {trainer.actor.snapshot_bytes} bytes; critic not snapshotted ({critic_bytes})"
    )
    off = _trainer(tiny_model_dir, tmp_path / "off", steps=1, ppo_epochs=2, minibatches=1, max_approx_kl=None)
    off.step(0)
    assert off.actor.snapshot is None and off.actor.snapshot_bytes == 0


# ---- the KL early stop -------------------------------------------------------------------------------------
def test_a_first_update_over_the_bound_is_scaled_back_inside_it_and_the_step_keeps_it(
    tiny_model_dir, tmp_path, monkeypatch
):
    probe = Probe(monkeypatch)
    bound = 1e-5  # far below the first update's KL at lr 1e-2, far above float32 noise in the log-probs
    trainer = _trainer(tiny_model_dir, tmp_path, steps=1, ppo_epochs=2, minibatches=1, max_approx_kl=bound)
    h = trainer.step(0)
    assert h["ppo/early_stopped"] == h["ppo/scaled"] == 1.0 and h["ppo/reverted"] == 0.0 and h["ppo/updates"] == 1.0
    kl = probe.whole_batch_kl()
    assert 0.25 * bound < kl <= bound, kl / bound  # scaled towards half the bound, checked to be inside it
    lora_b = [p for n, p in trainer.bundle.policy.named_parameters() if "lora_B" in n]
    assert any(float(p.detach().abs().max()) > 0 for p in lora_b)  # the policy moved, a little
    assert h["grad/critic_norm"] > 0  # the critic's update is not the KL bound's business


def test_a_later_update_over_the_bound_is_undone(tiny_model_dir, tmp_path, monkeypatch):
    kw = dict(steps=1, ppo_epochs=3, minibatches=1, lr_schedule="constant")
    probe = Probe(monkeypatch)
    _trainer(tiny_model_dir, tmp_path / "free", max_approx_kl=None, **kw).step(0)
    free = probe.passes
    after_first, after_second = free[1]["approx_kl"], free[2]["approx_kl"]  # each pass sees the previous update
    assert 0 < after_first < after_second
    probe.passes = []
    trainer = _trainer(tiny_model_dir, tmp_path / "bound", max_approx_kl=(after_first + after_second) / 2, **kw)
    h = trainer.step(0)
    assert h["ppo/reverted"] == 1.0 and h["ppo/scaled"] == 0.0 and h["ppo/updates"] == 1.0
    now = [p.detach() for p in trainer.bundle.policy.parameters() if p.requires_grad]
    for a, b in zip(now, free[1]["weights"], strict=True):
        assert torch.equal(a, b)  # back to the policy after the first update, bit for bit


# ---- the LoRA critic -------------------------------------------------------------------------------------
def test_lora_critic_is_a_second_adapter_on_the_policys_base(tiny_model_dir, tmp_path):
    def load(value_model):
        return load_policy(tiny_model_dir, lora=LoRA(r=4, alpha=8), value_model=value_model, seed=0)

    head, lora, separate = load("head"), load("lora"), load("separate")
    size = {name: sum(p.numel() for p in b.model.parameters()) for name, b in (("head", head), ("lora", lora))}
    policy_lora = sum(p.numel() for p in lora.trainable_parameters()[0])
    assert size["lora"] - size["head"] == policy_lora  # one more adapter of the policy's shape, no second base
    second_base = sum(p.numel() for p in separate.value.backbone.parameters())  # what "separate" adds instead
    assert sum(p.numel() for p in separate.model.parameters()) - size["head"] == second_base > 5 * policy_lora
    policy_params, critic_params = lora.trainable_parameters()
    assert len(critic_params) == len(policy_params) + 2 and not {id(p) for p in policy_params} & {
        id(p) for p in critic_params
    }

    q = torch.randint(5, 200, (2, 5), generator=torch.Generator().manual_seed(0))
    r = torch.randint(5, 200, (2, 6), generator=torch.Generator().manual_seed(1))
    batch = (q, torch.ones_like(q, dtype=torch.bool), r, torch.ones_like(r, dtype=torch.bool), 0.8)
    torch.nn.init.normal_(lora.value.head.weight, std=0.1)
    with torch.no_grad():
        lp0, v0 = lora.model(*batch)
        for n, p in lora.policy.named_parameters():  # move the critic's adapter only
            if f".{CRITIC_ADAPTER}." in n and "lora_B" in n:
                torch.nn.init.normal_(p, std=0.1)
        lp1, v1 = lora.model(*batch)
        for n, p in lora.policy.named_parameters():  # then the policy's
            if ".default." in n and "lora_B" in n:
                torch.nn.init.normal_(p, std=0.1)
        lp2, v2 = lora.model(*batch)
    assert torch.equal(lp0, lp1) and not torch.allclose(v0, v1, atol=1e-4)  # the critic's adapter moves values only
    assert torch.equal(v1, v2) and not torch.allclose(lp1, lp2, atol=1e-4)  # the policy's moves log-probs only
    assert all(p.requires_grad for n, p in lora.policy.named_parameters() if "lora_" in n)  # both still train

    trainer = _trainer(tiny_model_dir, tmp_path, steps=1, value_model="lora", max_approx_kl=None)
    critic_before = [p.detach().clone() for p in trainer.critic.params]
    res = trainer.fit(tracker=trainer_module.NullTracker())
    assert all(not torch.equal(a, b.detach()) for a, b in zip(critic_before, trainer.critic.params, strict=True))
    assert (res.adapter_dir / "adapter_model.safetensors").exists()
    assert not (res.adapter_dir / CRITIC_ADAPTER).exists()  # the published adapter is the policy's alone


def test_a_batch_in_one_chunk_keeps_its_logits_for_the_backward_instead_of_recomputing_them():
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 300, bias=False)
    calls = []
    head.register_forward_hook(lambda *_: calls.append(1))
    hidden = torch.randn(3, 11, 16, generator=g, requires_grad=True)
    ids = torch.randint(0, 300, (3, 11), generator=g)
    grads = {}
    for chunk in (33, 11):  # one chunk of 33 positions, or three
        calls.clear()
        (grads[chunk],) = torch.autograd.grad(
            selective_logprobs(hidden, head, ids, 0.7, chunk_tokens=chunk).sum(), hidden
        )
        assert len(calls) == {33: 1, 11: 6}[chunk]  # three chunks: each through the head again in the backward
    assert torch.allclose(grads[33], grads[11], atol=1e-6)
