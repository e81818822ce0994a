"""The PPO trainer on a real tiny Llama + BPE tokenizer with a chat template (the ``tiny_model_dir`` fixture)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from t2g_core.config.lora import LoRA
from t2g_core.config.ppo import PPOConfig
from t2g_core.policy_prompts import render_policy_prompt
from t2g_core.ppo import CriticSource, train
from t2g_core.ppo.models import load_policy
from t2g_core.ppo.rewards import place_task_rewards, score
from t2g_core.ppo.rollout import Rollout, batch_rows
from t2g_core.ppo.sampling import response_mask_after_eos, sample_responses
from t2g_core.schemas import ROLLOUTS, validate_frame
from t2g_core.spans import ParsedFeedback
from t2g_core.tracking import MemoryTracker

torch.set_num_threads(1)


class EdgeWordsCritic:
    """A real (if simple) critic: the first word of a response is poor, the last word good; fails on request."""

    def __init__(self, fail_ids=()):
        self.fail_ids = set(fail_ids)

    def critique(self, row):
        if row["id"] in self.fail_ids:
            raise RuntimeError("critic unavailable")
        words = row["response"].split()
        if len(words) < 2:
            return ParsedFeedback(critique="too short", poor_spans=words)
        return ParsedFeedback(
            critique=f"'{words[0]}' is wrong, '{words[-1]}' is right", good_spans=[words[-1]], poor_spans=[words[0]]
        )


class QuoteCritic:
    def __init__(self, quotes):
        self.quotes = quotes

    def critique(self, row):
        return ParsedFeedback(critique="quoted", poor_spans=[self.quotes[row["id"]]])


def _prompts(n=8):
    return pd.DataFrame(
        {
            "id": [f"p{i}" for i in range(n)],
            "task": "summarization",
            "prompt": [f"Post {i}: " + "Cai lives in Quito " * (1 + i % 3) for i in range(n)],
        }
    )


def _cfg(sampling: dict | None = None, **kw):
    base = dict(
        steps=2,
        batch_size=4,
        minibatches=2,
        ppo_epochs=2,
        sampling={"max_new_tokens": 10, **(sampling or {})},
        log_every=1,
        save_every=100,
        value_model="head",
        heatmap_samples=2,
        learning_rate=1e-2,
    )
    return PPOConfig(**(base | kw))


def _adapter(run_dir):
    return load_file(str(run_dir / "adapter" / "adapter_model.safetensors"))


def test_span_rewards_land_on_the_quoted_tokens_with_left_padding_and_chat_template(tiny_model_dir):
    bundle = load_policy(tiny_model_dir, lora=LoRA(r=4, alpha=8), value_model="head", seed=0)
    tok = bundle.tokenizer
    rows = [
        {"id": "a", "task": "summarization", "prompt": "A short post."},
        {"id": "b", "task": "summarization", "prompt": "A much longer post that needs left padding in the batch."},
    ]
    responses = ["Cai lives in Quito with dogs.", "Bo works as a judge in Lima."]
    quotes = {"a": "in Quito", "b": "judge"}
    enc = tok(
        [render_policy_prompt(tok, r["task"], r["prompt"]) for r in rows],
        add_special_tokens=False,
        padding=True,
        return_tensors="pt",
    )
    assert (enc["attention_mask"][0] == 0).any() and enc["attention_mask"][:, -1].all()  # left padded
    ids = [tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for r in responses]
    width = max(map(len, ids)) + 2
    response_ids = torch.tensor([x + [tok.pad_token_id] * (width - len(x)) for x in ids])
    mask, has_eos = response_mask_after_eos(response_ids, tok.eos_token_id)
    ro = Rollout(rows, [0, 1], enc["input_ids"], enc["attention_mask"].bool(), response_ids, mask, has_eos)
    scored = score(ro, CriticSource(QuoteCritic(quotes)), tok, None)
    cfg = _cfg(reward_mode="span")
    task, terminal, labels = place_task_rewards(scored, ro, cfg)
    for b, s in enumerate(scored):
        assert s.text == responses[b]
        hit = [t for t in range(width) if task[b, t] != 0]
        assert hit, "no token got the span reward"
        assert all(task[b, t] == -1.0 for t in hit)
        covered = tok.decode(response_ids[b, hit[0] : hit[-1] + 1])
        assert quotes[rows[b]["id"]] in covered and len(covered) <= len(quotes[rows[b]["id"]]) + 2
        assert hit == list(range(hit[0], hit[-1] + 1))
    scalar, _, _ = place_task_rewards(scored, ro, _cfg(reward_mode="scalar"))
    for b in range(2):  # the scalar lands on the EOS (last real token), not on the PAD after it
        eos_at = len(ids[b]) - 1
        assert scalar[b].nonzero().flatten().tolist() == [eos_at]
        assert float(scalar[b].sum()) == pytest.approx(float(task[b].sum()))


def test_left_padding_does_not_change_logprobs_or_values(tiny_model_dir):
    bundle = load_policy(tiny_model_dir, lora=LoRA(r=4, alpha=8), value_model="separate", seed=0)
    torch.nn.init.normal_(bundle.value.head.weight, std=0.1)  # a non-zero head so values are informative
    g = torch.Generator().manual_seed(0)
    q = torch.randint(5, 200, (1, 7), generator=g)
    r = torch.randint(5, 200, (1, 5), generator=g)
    ones = torch.ones_like(r, dtype=torch.bool)
    lp_alone, v_alone = bundle.model(q, torch.ones_like(q, dtype=torch.bool), r, ones, 0.7)
    pad = torch.full((1, 4), bundle.tokenizer.pad_token_id)
    q_pad = torch.cat([pad, q], 1)
    m_pad = torch.cat([torch.zeros(1, 4, dtype=torch.bool), torch.ones_like(q, dtype=torch.bool)], 1)
    lp_pad, v_pad = bundle.model(q_pad, m_pad, r, ones, 0.7)
    assert torch.allclose(lp_alone, lp_pad, atol=1e-5) and torch.allclose(v_alone, v_pad, atol=1e-5)
    with torch.no_grad():  # adapter off == base: LoRA B starts at zero, so policy == reference at init
        lp_ref, _ = bundle.model(q, torch.ones_like(q, dtype=torch.bool), r, ones, 0.7, reference=True)
    assert torch.allclose(lp_alone, lp_ref, atol=1e-6)


def test_sampled_logprobs_match_recomputed_with_temperature_and_padding(tiny_model_dir):
    bundle = load_policy(tiny_model_dir, lora=LoRA(r=4, alpha=8), value_model="head", seed=0)
    tok = bundle.tokenizer
    texts = [
        render_policy_prompt(tok, "summarization", p) for p in ("Hi.", "A longer post about Cai and Quito and dogs.")
    ]
    enc = tok(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    kw = dict(max_new_tokens=8, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, seeds=[1, 2])
    ids, sampled_lp = sample_responses(
        bundle.policy, enc["input_ids"], enc["attention_mask"], sampling=0.6, return_logprobs=True, **kw
    )
    again = sample_responses(bundle.policy, enc["input_ids"], enc["attention_mask"], sampling=0.6, **kw)
    assert torch.equal(ids, again)  # per-sample streams: same seeds, same samples
    mask, _ = response_mask_after_eos(ids, tok.eos_token_id)
    q, qm = enc["input_ids"], enc["attention_mask"].bool()
    with torch.no_grad():
        lp, _ = bundle.model(q, qm, ids, mask, 0.6)
        lp_wrong_tau, _ = bundle.model(q, qm, ids, mask, 1.0)
    assert torch.allclose(lp[mask], sampled_lp[mask], atol=1e-4)
    assert not torch.allclose(lp_wrong_tau[mask], sampled_lp[mask], atol=1e-2)
    single = sample_responses(
        bundle.policy, q[1:, -int(qm[1].sum()) :], qm[1:, -int(qm[1].sum()) :], sampling=0.6, **(kw | {"seeds": [2]})
    )
    assert torch.equal(single[0, : ids.shape[1]], ids[1, : single.shape[1]])  # batch composition does not matter


def test_trainer_runs_logs_and_first_minibatch_is_on_policy(tiny_model_dir, tmp_path):
    tracker = MemoryTracker()
    res = train(
        _cfg(sampling={"temperature": 0.7}, eval_every=1),
        tiny_model_dir,
        _prompts(),
        tmp_path / "run",
        reward_source=CriticSource(EdgeWordsCritic(fail_ids={"p1", "p5"})),
        tracker=tracker,
        eval_df=_prompts(4),
        task_metric=lambda rows, texts: [float(len(t.split()) > 3) for t in texts],
    )
    assert res.steps_done == 2 and len(res.history) == 2
    for h in res.history:
        assert h["ppo/first_ratio"] == pytest.approx(1.0, abs=1e-5)
        assert abs(h["ppo/first_approx_kl"]) < 1e-7
    first = res.history[0]
    assert first["kl/mean"] == pytest.approx(0.0, abs=1e-6)  # LoRA starts as the reference
    for key in (
        "reward/span_mean",
        "reward/positive_frac",
        "kl/mean",
        "loss/policy",
        "loss/value",
        "ppo/clipfrac",
        "ppo/approx_kl",
        "time/rollout",
        "time/score",
        "time/update",
        "time/span_labels",  # the phases benchmarks/bench_ppo_step.py reads
        "time/forward",
        "time/rewards",
        "time/step",
        "parse/failure_rate",
        "task/error",
        "eval/task_error",
    ):
        assert key in first, key
    for h in res.history:  # failed critiques are counted and the step still trains
        ids = [f"p{i}" for i in batch_rows(h["step"], 8, 4, 0)]
        assert h["parse/failure_rate"] == pytest.approx(sum(i in ("p1", "p5") for i in ids) / 4)
        assert h["ppo/updates"] > 0
    assert [s for s, _ in tracker.metrics] == [0, 1]
    roll = pd.read_parquet(res.rollouts_path)
    validate_frame(roll, ROLLOUTS, "rollouts")
    failed = roll[roll["critique"].isna()]
    assert len(failed) > 0 and all(len(r) > 0 for r in failed["token_rewards"])
    page = res.heatmaps[0].read_text()
    assert "is wrong" in page and "rgba(215,58,73" in page  # critique beside tokens coloured negative
    assert _adapter(tmp_path / "run")  # the adapter folder loads
    assert json.loads((tmp_path / "run" / "history.json").read_text())[1]["step"] == 1


def test_parse_failures_get_the_fallback_terminal_reward(tiny_model_dir, tmp_path):
    res = train(
        _cfg(steps=1, parse_failure_reward=-3.0, kl_coef=0.0),
        tiny_model_dir,
        _prompts(4),
        tmp_path / "run",
        reward_source=CriticSource(EdgeWordsCritic(fail_ids={"p0", "p1", "p2", "p3"})),
    )
    roll = pd.read_parquet(res.rollouts_path)
    assert res.history[0]["parse/failure_rate"] == 1.0
    for rewards in roll["token_rewards"]:
        assert rewards[-1] == pytest.approx(-3.0) and all(r == 0 for r in rewards[:-1])


@pytest.mark.slow  # trains PPO twice per value model
@pytest.mark.parametrize("value_model", ["head", "separate", "lora"])
def test_resume_equals_uninterrupted(tiny_model_dir, tmp_path, value_model):
    cfg = _cfg(steps=4, save_every=2, value_model=value_model, target_kl=0.01, kl_horizon=10, grad_accum=2)
    source = CriticSource(EdgeWordsCritic())
    full = train(cfg, tiny_model_dir, _prompts(6), tmp_path / "full", reward_source=source)
    part = train(cfg, tiny_model_dir, _prompts(6), tmp_path / "cut", reward_source=source, stop_after=2)
    assert part.steps_done == 2
    resumed = train(cfg, tiny_model_dir, _prompts(6), tmp_path / "cut", reward_source=source, resume=True)
    assert resumed.steps_done == 4 and [h["step"] for h in resumed.history] == [0, 1, 2, 3]
    a, b = _adapter(tmp_path / "full"), _adapter(tmp_path / "cut")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    assert any(float(v.abs().sum()) > 0 for k, v in a.items() if "lora_B" in k)  # training moved the adapter
    for h_full, h_res in zip(full.history, resumed.history, strict=True):
        assert h_full["kl/beta"] == pytest.approx(h_res["kl/beta"], rel=1e-9)
        assert h_full["loss/policy"] == pytest.approx(h_res["loss/policy"], abs=1e-6)
    t_full, t_cut = (
        torch.load(tmp_path / run / "checkpoints" / "step-000004" / "trainer.pt", weights_only=False)
        for run in ("full", "cut")
    )
    for part in ("value", "critic_adapter"):  # the head, and a LoRA critic's adapter (None for the others)
        assert (t_full[part] is None) == (t_cut[part] is None) == (part == "critic_adapter" and value_model != "lora")
        for k in t_full[part] or {}:
            assert torch.allclose(t_full[part][k], t_cut[part][k], atol=1e-6), k


def test_a_resumed_run_logs_every_step_into_its_tracker(tiny_model_dir, tmp_path):
    """The tracking run of a resumed PPO run holds the restored steps too, not only those after the checkpoint."""
    from t2g_core.tracking import MemoryTracker

    cfg = _cfg(steps=3, save_every=1)
    source = CriticSource(EdgeWordsCritic())
    train(cfg, tiny_model_dir, _prompts(6), tmp_path / "run", reward_source=source, stop_after=2)
    tracker = MemoryTracker()
    train(cfg, tiny_model_dir, _prompts(6), tmp_path / "run", reward_source=source, resume=True, tracker=tracker)
    steps = [step for step, metrics in tracker.metrics if "loss/policy" in metrics]
    assert steps == [0, 1, 2]


def test_resume_without_checkpoint_is_a_clear_error(tiny_model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(
            _cfg(),
            tiny_model_dir,
            _prompts(),
            tmp_path / "none",
            reward_source=CriticSource(EdgeWordsCritic()),
            resume=True,
        )


def test_missing_eos_penalty_and_parse_fallback_replace_the_task_reward():
    from t2g_core.ppo.scoring import ScoredResponse

    ids = torch.tensor([[5, 6, 2, 0], [5, 6, 7, 8], [5, 2, 0, 0]])  # eos = 2, pad = 0
    mask, has_eos = response_mask_after_eos(ids, 2)
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]] and has_eos.tolist() == [True, False, True]
    ro = Rollout(
        [{}] * 3, [0, 1, 2], torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1, dtype=torch.bool), ids, mask, has_eos
    )
    ok = ParsedFeedback(critique="c", poor_spans=["x"])
    failed = ParsedFeedback(critique=None, status="parse_error", error="bad json")
    scored = [
        ScoredResponse("", [], [-1.0, 0.0, 0.0], ok, 1, 0),
        ScoredResponse("", [], [-1.0, 1.0, 0.0, 0.0], ok, 2, 0),
        ScoredResponse("", [], [0.0, 0.0], failed, 0, 0),
    ]
    task, terminal, _ = place_task_rewards(scored, ro, _cfg(missing_eos_penalty=-1.5, parse_failure_reward=-0.5))
    assert task.tolist() == [[-1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert terminal.tolist() == [0.0, -1.5, -0.5]
    task, terminal, _ = place_task_rewards(scored, ro, _cfg(reward_mode="scalar"))
    assert task[0].tolist() == [0, 0, -1, 0] and task[2].tolist() == [0, 0, 0, 0]  # scalar on the EOS
    assert task[1, 3] == 0.0 and terminal.tolist() == [0.0, 0.0, 0.0]  # penalty off: the missing-EOS row keeps it
    assert float(task[1].sum()) == 0.0  # -1 + 1
    _, terminal, _ = place_task_rewards(scored, ro, _cfg(terminal_coef=0.5))  # hybrid: span + scalar on the EOS
    assert terminal.tolist() == [-0.5, 0.0, 0.0]


@pytest.mark.parametrize("mode", ["scalar", "uniform"])
def test_terminal_coef_is_refused_where_it_would_count_the_scalar_twice(mode):
    with pytest.raises(ValueError, match="terminal_coef applies to span and dense"):
        _cfg(reward_mode=mode, terminal_coef=0.5)
    for hybrid in ("span", "dense"):
        assert _cfg(reward_mode=hybrid, terminal_coef=0.5).terminal_coef == 0.5


def test_grad_accumulation_matches_one_big_minibatch(tiny_model_dir, tmp_path):
    source = CriticSource(EdgeWordsCritic())
    one = train(_cfg(steps=1, grad_accum=1), tiny_model_dir, _prompts(), tmp_path / "a", reward_source=source)
    two = train(_cfg(steps=1, grad_accum=2), tiny_model_dir, _prompts(), tmp_path / "b", reward_source=source)
    assert one.history[0]["loss/policy"] == pytest.approx(two.history[0]["loss/policy"], abs=1e-6)
    a, b = _adapter(tmp_path / "a"), _adapter(tmp_path / "b")
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    # Adam's first update is ~lr per weight and amplifies summation-order noise in near-zero gradients (seen up to
    # 1.3e-4 on some CPUs), so allow 10% of lr; dropped or misindexed rows move weights by ~lr. (Normalisation across
    # chunks: test_rl_math normalizer test.)
    assert worst < 1e-3, worst


def test_reference_stays_the_base_model_and_dropout_is_off(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from t2g_core.ppo import PPOTrainer

    trainer = PPOTrainer(
        _cfg(steps=2, max_approx_kl=1.0),
        tiny_model_dir,
        _prompts(),
        tmp_path / "run",
        reward_source=CriticSource(EdgeWordsCritic()),
    )
    res = trainer.fit(tracker=MemoryTracker())
    assert res.history[0]["ppo/updates"] == 4
    assert all(not m.training for m in trainer.bundle.policy.modules())
    assert all(m.p == 0 for m in trainer.bundle.policy.modules() if isinstance(m, torch.nn.Dropout))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    ids = torch.randint(5, 200, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), trainer.bundle.policy.disable_adapter():
        ref = trainer.bundle.policy(input_ids=ids).logits
    with torch.no_grad():
        trained = trainer.bundle.policy(input_ids=ids).logits
        expected = base(input_ids=ids).logits
    assert torch.allclose(ref, expected, atol=1e-5)  # adapter off == untouched base weights
    assert not torch.allclose(trained, expected, atol=1e-4)  # while the adapter did learn


def test_learning_rate_warms_up_over_updates_taken_and_decays_with_progress_not_with_updates():
    from t2g_core.ppo.optimizer import lr_factor

    cfg = PPOConfig(steps=10, ppo_epochs=2, minibatches=2, warmup_steps=4)  # 4 planned updates per step
    linear = lr_factor(cfg)
    warm = lr_factor(cfg.model_copy(update={"lr_schedule": "constant"}))
    assert [warm(0, j, taken=j) for j in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]  # warm-up over updates taken
    assert linear(0, 1, taken=1) == pytest.approx(0.5 * (1 - 1 / 40))
    # step 5, planned update 2 of 4: progress 5.5 / 10, whatever number of updates the early stop skipped before
    assert linear(5, 2, taken=22) == linear(5, 2, taken=8) == pytest.approx(0.45)
    assert linear(9, 3, taken=39) == pytest.approx(0.025) and linear(10, 0, taken=40) == 0.0
    critic_first = PPOConfig(steps=10, critic_warmup_steps=2, ppo_epochs=2, minibatches=2)
    assert lr_factor(critic_first)(2, 0, 0) == 1.0  # the actor's decay starts after the critic warm-up
    assert lr_factor(critic_first, actor=False)(2, 0, 8) == pytest.approx(0.8)
    constant = lr_factor(PPOConfig(steps=10, lr_schedule="constant"))
    assert constant(0, 0, 0) == constant(9, 3, 1000) == 1.0


def test_optimizer_revert_restores_parameters_moments_and_warmup_count():
    from t2g_core.ppo.optimizer import Optimizer

    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = Optimizer([w], lr=0.1, max_grad_norm=1.0, factor=lambda step, j, taken: 1.0)
    for target in (3.0, 5.0):
        w.grad = 2 * (w.detach() - target)
        before_w, before_state = w.detach().clone(), {k: v.clone() for k, v in opt.opt.state.get(w, {}).items()}
        norm = opt.step(0, 0)
    assert norm == pytest.approx(float(2 * (before_w - 5.0).norm()))  # the norm before clipping
    assert opt.revert() and opt.taken == 1
    assert torch.equal(w.detach(), before_w)
    for k, v in before_state.items():
        assert torch.equal(opt.opt.state[w][k], v), k
    assert not opt.revert()  # one step back only
    opt.step(0, 0)
    opt.commit()  # the next PPO step begins: its early stop may not undo this one
    assert not opt.revert()
    plain = Optimizer([w], lr=0.1, max_grad_norm=1.0, factor=lambda step, j, taken: 1.0, revertible=False)
    w.grad, before = torch.ones(2), w.detach().clone()
    plain.step(0, 0)
    assert plain.snapshot is None and not plain.revert() and not torch.equal(w.detach(), before)


def test_step_timer_adds_up_a_phase_entered_twice_and_times_the_step_as_its_phases():
    import time

    from t2g_core.ppo.metrics import StepTimer

    timer = StepTimer()
    for name in ("span_labels", "score", "span_labels"):
        with timer.phase(name):
            time.sleep(0.02)
    with pytest.raises(RuntimeError), timer.phase("update"):  # a phase that fails is still timed
        raise RuntimeError
    m = timer.metrics()
    assert set(m) == {"time/span_labels", "time/score", "time/update", "time/step"}
    assert m["time/span_labels"] >= 0.04 and m["time/score"] >= 0.02
    assert m["time/step"] == pytest.approx(m["time/span_labels"] + m["time/score"] + m["time/update"])


def test_group_batches_repeat_each_prompt_and_keep_its_samples_distinct(tiny_model_dir, tmp_path):
    from t2g_core.ppo import PPOTrainer
    from t2g_core.ppo.rollout import rollout

    assert batch_rows(0, 8, 6, 0, group_size=3)[:3] == [batch_rows(0, 8, 2, 0)[0]] * 3
    assert batch_rows(1, 8, 6, 0, group_size=3)[3:] == [batch_rows(1, 8, 2, 0)[1]] * 3
    cfg = _cfg(
        batch_size=4, group_size=2, advantage_estimator="rloo", sampling={"temperature": 1.5, "max_new_tokens": 12}
    )
    trainer = PPOTrainer(
        cfg, tiny_model_dir, _prompts(), tmp_path / "run", reward_source=CriticSource(EdgeWordsCritic())
    )
    rows, index = trainer.local_rows(0)
    ro = rollout(trainer.generate, trainer.bundle.tokenizer, rows, index, cfg, 0)
    assert ro.group.tolist() == [0, 0, 1, 1] and rows[0]["id"] == rows[1]["id"] != rows[2]["id"]
    assert not torch.equal(ro.response_ids[0], ro.response_ids[1])  # each sample has its own random stream


def test_critic_free_estimators_train_no_critic(tiny_model_dir, tmp_path):
    from t2g_core.ppo import PPOTrainer

    for estimator in ("rloo", "grpo"):
        cfg = _cfg(steps=1, group_size=2, advantage_estimator=estimator, value_model="separate")
        trainer = PPOTrainer(
            cfg, tiny_model_dir, _prompts(), tmp_path / estimator, reward_source=CriticSource(EdgeWordsCritic())
        )
        assert trainer.critic is None and trainer.bundle.value.backbone is None  # no value backbone is even loaded
        h = trainer.step(0)
        assert h["loss/value"] == 0.0 and "grad/critic_norm" not in h and "value/explained_variance" not in h
        assert h["ppo/updates"] > 0 and float(trainer.bundle.value.head.weight.detach().abs().sum()) == 0.0


def test_critic_warmup_freezes_the_policy_and_the_step_logs_actor_and_critic_apart(tiny_model_dir, tmp_path):
    from t2g_core.ppo import PPOTrainer

    cfg = _cfg(
        steps=3, critic_warmup_steps=2, advantage_estimator="span_bootstrap", max_approx_kl=1.0, max_grad_norm=1e-3
    )
    trainer = PPOTrainer(
        cfg, tiny_model_dir, _prompts(), tmp_path / "run", reward_source=CriticSource(EdgeWordsCritic())
    )
    lora_b = [p for n, p in trainer.bundle.policy.named_parameters() if "lora_B" in n]
    head = trainer.bundle.value.head.weight
    for step in range(2):
        h = trainer.step(step)
        assert h["ppo/critic_only"] == 1.0 and h["ppo/updates"] == 0.0 and "grad/actor_norm" not in h
        assert all(float(p.detach().abs().max()) == 0.0 for p in lora_b)  # the policy has not moved
    assert float(head.detach().abs().sum()) > 0  # the critic has
    h = trainer.step(2)
    assert h["ppo/critic_only"] == 0.0 and h["ppo/updates"] == 4.0
    assert any(float(p.detach().abs().max()) > 0 for p in lora_b)
    assert h["grad/actor_clipped"] == 1.0 and h["grad/actor_norm"] > 1e-3  # its own clip, at 1e-3
    assert h["grad/critic_norm"] > 0 and 0.0 <= h["grad/critic_clipped"] <= 1.0
    for key in ("policy/entropy", "value/explained_variance", "value/clipfrac", "kl/per_token", "lr/actor"):
        assert key in h and h[key] == h[key], key  # present and not NaN
    assert h["policy/entropy"] > 0
