"""Self-distillation credit (``ppo.self_distillation``): the math against plain loops, d_t against a hand computation
on the tiny model, the teacher without gradients, the student never seeing the critique, every estimator taking the
term, and a resumed run equal to the uninterrupted one."""

from __future__ import annotations

import math

import pytest
import torch

import t2g_core.ppo.trainer as trainer_module
from t2g_core.config.ppo import PPOConfig
from t2g_core.config.self_distillation import SelfDistillation
from t2g_core.policy_prompts import INSTRUCTIONS
from t2g_core.ppo import CriticSource, PPOTrainer, train
from t2g_core.ppo.distillation import (
    MAX_CRITIQUE_CHARS,
    critique_text,
    distillation_rewards,
    teacher_prompt,
)
from t2g_core.ppo.experience import advantages_and_returns
from t2g_core.ppo.models import POLICY_ADAPTER, TEACHER_ADAPTER, adapter_pairs, ema_adapter
from t2g_core.ppo.rewards import decode, place_task_rewards
from t2g_core.ppo.rollout import Rollout, rollout
from t2g_core.ppo.scoring import label_responses
from t2g_core.rl import estimate_advantages, segment_starts
from t2g_core.rl.distillation import credit_parts, judged_credit, topk_credit
from t2g_core.spans import ParsedFeedback
from tests.core.test_ppo_trainer import EdgeWordsCritic, _adapter, _cfg, _prompts

torch.set_num_threads(1)
SD = {"mode": "add", "clip": 100.0}  # a clip no log-ratio here reaches: d_t is the raw log-ratio


def _sd_cfg(**sd) -> PPOConfig:
    return _cfg(self_distillation=SD | sd)


# ------------------------------------------------------------------------------------------------ the math
def test_topk_credit_matches_a_loop_and_is_the_whole_kl_at_k_equal_v():
    torch.manual_seed(0)
    n, v = 6, 9
    logits, teacher_logits, ids = torch.randn(n, v) * 2, torch.randn(n, v) * 2, torch.randint(0, v, (n,))
    for k in (1, 3, v):
        own, kl = topk_credit(logits, teacher_logits, ids, k, temperature=0.7)
        for i in range(n):
            p = torch.softmax(logits[i] / 0.7, -1).tolist()
            q = torch.softmax(teacher_logits[i] / 0.7, -1).tolist()
            top = sorted(range(v), key=lambda j: -p[j])[:k]
            rest = [j for j in range(v) if j not in top]
            p_tail, q_tail = sum(p[j] for j in rest), sum(q[j] for j in rest)
            want = sum(p[j] * math.log(p[j] / q[j]) for j in top) + (p_tail * math.log(p_tail / q_tail) if rest else 0)
            y = int(ids[i])
            want_own = math.log(q[y] / p[y]) if y in top else math.log(q_tail / p_tail)
            assert float(kl[i]) == pytest.approx(want, abs=1e-5)
            assert float(own[i]) == pytest.approx(want_own, abs=1e-5)
    # k = V: the whole reverse KL, and the sampled token's own log-ratio
    own, kl = topk_credit(logits, teacher_logits, ids, v)
    logp, logq = torch.log_softmax(logits, -1), torch.log_softmax(teacher_logits, -1)
    assert torch.allclose(kl, (logp.exp() * (logp - logq)).sum(-1), atol=1e-6)
    assert torch.allclose(own, (logq - logp).gather(-1, ids[:, None]).squeeze(-1), atol=1e-6)


def test_the_own_term_has_zero_mean_under_the_student_so_the_state_reward_carries_the_expectation():
    """E_{y ~ p}[l(y)] = -KL on the bucketed support: own + KL is a zero-mean credit for the sampled token."""
    torch.manual_seed(1)
    v, k = 7, 2
    logits, teacher_logits = torch.randn(1, v), torch.randn(1, v)
    p = torch.softmax(logits, -1)[0]
    owns, kl = zip(*(topk_credit(logits, teacher_logits, torch.tensor([y]), k) for y in range(v)), strict=True)
    expected = sum(float(p[y]) * float(owns[y][0]) for y in range(v))
    assert expected == pytest.approx(-float(kl[0][0]), abs=1e-6)


def test_judged_credit_clips_and_keeps_the_sign_of_a_judged_token():
    credit = torch.tensor([[3.0, -3.0, 0.5, -0.5, 2.0, -2.0, 9.0]])
    labels = torch.tensor([[-1.0, -1.0, 1.0, 1.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True] * 6 + [False]])
    got = judged_credit(credit, labels, mask, clip=1.0)
    want = []
    for c, lab, m in zip(credit[0].tolist(), labels[0].tolist(), mask[0].tolist(), strict=True):
        g = max(-1.0, min(1.0, c))
        g = min(g, 0.0) if lab < 0 else max(g, 0.0) if lab > 0 else g
        want.append(g if m else 0.0)
    assert got[0].tolist() == pytest.approx(want)
    raw = judged_credit(credit, labels, mask, clip=1.0, judge=False)  # the teacher alone: clipped, never judged
    assert raw[0].tolist() == pytest.approx([max(-1.0, min(1.0, c)) for c in credit[0, :6].tolist()] + [0.0])


def test_credit_parts_sum_to_the_judged_credit_and_sampled_credit_is_all_reward():
    judged, kl = torch.tensor([[0.4, -1.0, 0.2]]), torch.tensor([[0.3, 2.5, 0.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    reward, own = credit_parts(judged, kl, mask, clip=1.0)
    assert reward[0].tolist() == pytest.approx([-0.3, -1.0, 0.0]) and torch.allclose(reward + own, judged)
    reward, own = credit_parts(judged, None, mask, clip=1.0)
    assert torch.equal(reward, judged) and not own.any()
    # SDPO's placement: token t's advantage alone, the top-k state part dropped as a baseline
    reward, own = credit_parts(judged, None, mask, clip=1.0, placement="advantage")
    assert not reward.any() and torch.equal(own, judged)
    reward, own = credit_parts(judged, kl, mask, clip=1.0, placement="advantage")
    assert not reward.any() and own[0].tolist() == pytest.approx([0.7, 0.0, 0.2])


# ------------------------------------------------------------------------------------- critiques and prompts
def test_the_critique_is_the_feedbacks_own_else_rendered_from_its_spans_else_none():
    text = "A person named Ivo lives in Lima."
    assert critique_text(text, ParsedFeedback(" Lima is wrong. ", poor_spans=["Lima"])) == "Lima is wrong."
    rendered = critique_text(text, ParsedFeedback(None, good_spans=["Ivo"], poor_spans=["Lima"], missing=("age",)))
    assert rendered == 'Wrong or unsupported: "Lima". Supported: "Ivo". Leaves out 1 required item(s): age.'
    assert critique_text(text, ParsedFeedback(None)) is None  # says nothing
    assert critique_text(text, ParsedFeedback("x", status="parse_error")) is None  # failed: no credit
    assert len(critique_text(text, ParsedFeedback("y" * 10**6))) == MAX_CRITIQUE_CHARS


def test_the_teacher_prompt_is_the_policys_with_the_critique_appended_to_its_user_turn(tiny_model_dir):
    from t2g_core.models.loading import load_tokenizer
    from t2g_core.policy_prompts import render_policy_prompt

    tok = load_tokenizer(tiny_model_dir)
    row = {"task": "summarization", "prompt": "Cai lives in Quito."}
    student = render_policy_prompt(tok, row["task"], row["prompt"])
    teacher = teacher_prompt(tok, row, "It says {critique}", "\n[{critique}]")
    content = f"{INSTRUCTIONS['summarization']}\n{row['prompt']}\n[It says {{critique}}]"
    assert teacher == tok.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    assert teacher != student and "It says" not in student


def test_replace_drops_the_span_omission_and_verdict_rewards_but_keeps_the_fallbacks():
    cfg = PPOConfig(self_distillation={"mode": "replace"}, parse_failure_reward=-3.0)
    fbs = [
        ParsedFeedback("ok", poor_spans=["b"], missing=("x",), outcome=1.0),
        ParsedFeedback(None, status="parse_error"),
    ]
    decoded = [("a b", [(0, 1), (1, 3), (3, 3)]), ("a b", [(0, 1), (1, 3), (3, 3)])]
    scored = label_responses(decoded, fbs, None)
    ro = Rollout(
        [{}, {}],
        [0, 1],
        torch.zeros(2, 1),
        torch.ones(2, 1, dtype=torch.bool),
        torch.zeros(2, 3),
        torch.ones(2, 3, dtype=torch.bool),
        torch.ones(2, dtype=torch.bool),
    )
    task, terminal, labels = place_task_rewards(scored, ro, cfg)
    assert not task.any() and terminal.tolist() == [0.0, -3.0]
    assert labels[0, 1] == -1  # the labels stay: they judge the self-distillation credit


# ------------------------------------------------------------------------------ d_t on the tiny model, by hand
def _trainer(tiny_model_dir, tmp_path, **sd) -> PPOTrainer:
    return PPOTrainer(
        _sd_cfg(**sd), tiny_model_dir, _prompts(), tmp_path, reward_source=CriticSource(EdgeWordsCritic())
    )


def _perturb(trainer: PPOTrainer) -> None:
    """Move the policy's adapter off the reference (LoRA B starts at 0), so policy and reference teachers differ."""
    torch.manual_seed(3)
    with torch.no_grad():
        for n, p in trainer.bundle.policy.named_parameters():
            if f".{POLICY_ADAPTER}." in n and "lora_B" in n:
                p.normal_(0, 0.5)


def _batch(trainer: PPOTrainer):
    rows, index = trainer.local_rows(0)
    ro = rollout(trainer.generate, trainer.bundle.tokenizer, rows, index, trainer.cfg, 0)
    decoded = decode(ro, trainer.bundle.tokenizer)
    feedback = trainer.reward_source.critique_batch(
        [{**r, "response": t} for r, (t, _) in zip(ro.rows, decoded, strict=True)]
    )
    return ro, label_responses(decoded, feedback, None)


def _by_hand(model, tok, prompt_text: str, response: list[int]) -> list[float]:
    """log p(y_t | prompt, y_<t) of each response id, from one unpadded forward and a full log-softmax per position."""
    ids = tok(prompt_text, add_special_tokens=False)["input_ids"]
    logits = model(input_ids=torch.tensor([ids + response])).logits[0]
    out = []
    for t, y in enumerate(response):
        logp = torch.log_softmax(logits[len(ids) + t - 1].float(), -1)
        out.append(float(logp[y]))
    return out


@pytest.mark.parametrize("teacher", ["policy", "reference"])
def test_sampled_credit_is_the_teacher_minus_student_log_prob_computed_by_hand(tiny_model_dir, tmp_path, teacher):
    from t2g_core.policy_prompts import render_policy_prompt

    trainer = _trainer(tiny_model_dir, tmp_path, teacher=teacher)
    _perturb(trainer)
    ro, scored = _batch(trainer)
    old = trainer_module.old_ref_values(trainer.model, ro, trainer.cfg, "cpu")[0]
    teaching = trainer.teacher.read(trainer.model, ro, scored, old, "cpu")
    tok, policy = trainer.bundle.tokenizer, trainer.bundle.policy
    template = trainer.cfg.self_distillation.template
    for b, s in enumerate(scored):
        response = ro.response_ids[b][ro.response_mask[b]].tolist()
        row = ro.rows[b]
        content = f"{INSTRUCTIONS[row['task']]}\n{row['prompt']}" + template.replace("{critique}", s.feedback.critique)
        teacher_text = tok.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
        with torch.no_grad():
            student = _by_hand(policy, tok, render_policy_prompt(tok, row["task"], row["prompt"]), response)
            if teacher == "reference":
                with policy.disable_adapter():
                    taught = _by_hand(policy, tok, teacher_text, response)
            else:
                taught = _by_hand(policy, tok, teacher_text, response)
        want = [q - p for q, p in zip(taught, student, strict=True)]
        assert teaching.ratio[b, : len(want)].tolist() == pytest.approx(want, abs=1e-4)
        assert not teaching.ratio[b, len(want) :].any()
    assert teaching.critiqued.all() and abs(float(teaching.ratio.sum())) > 1e-3


def test_topk_credit_on_the_tiny_model_equals_the_loop_on_its_full_logits(tiny_model_dir, tmp_path):
    trainer = _trainer(tiny_model_dir, tmp_path, top_k=5)
    _perturb(trainer)
    ro, scored = _batch(trainer)
    old = trainer_module.old_ref_values(trainer.model, ro, trainer.cfg, "cpu")[0]
    teaching = trainer.teacher.read(trainer.model, ro, scored, old, "cpu")
    tok, policy = trainer.bundle.tokenizer, trainer.bundle.policy
    from t2g_core.policy_prompts import render_policy_prompt

    b, s = 0, scored[0]
    response = ro.response_ids[b][ro.response_mask[b]].tolist()
    row = ro.rows[b]
    with torch.no_grad():
        logits = []
        for text in (
            render_policy_prompt(tok, row["task"], row["prompt"]),
            teacher_prompt(tok, row, s.feedback.critique, trainer.cfg.self_distillation.template),
        ):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            logits.append(policy(input_ids=torch.tensor([ids + response])).logits[0, len(ids) - 1 : -1])
    own, kl = topk_credit(logits[0], logits[1], torch.tensor(response), 5)
    assert teaching.ratio[b, : len(response)].tolist() == pytest.approx(own.tolist(), abs=1e-4)
    assert teaching.kl[b, : len(response)].tolist() == pytest.approx(kl.tolist(), abs=1e-4)


# ------------------------------------------------------------------ the teacher without gradients, EMA
@pytest.mark.parametrize("teacher", ["policy", "reference", "ema"])
def test_the_teacher_receives_no_gradient(tiny_model_dir, tmp_path, teacher):
    trainer = _trainer(tiny_model_dir, tmp_path, teacher=teacher)
    ro, scored = _batch(trainer)
    old = trainer_module.old_ref_values(trainer.model, ro, trainer.cfg, "cpu")[0]
    flags = {n: p.requires_grad for n, p in trainer.bundle.policy.named_parameters()}
    with torch.enable_grad():
        teaching = trainer.teacher.read(trainer.model, ro, scored, old, "cpu")
    assert not teaching.ratio.requires_grad
    assert all(p.grad is None for p in trainer.model.parameters())
    assert flags == {n: p.requires_grad for n, p in trainer.bundle.policy.named_parameters()}  # no adapter unfrozen
    optimised = {id(p) for p in trainer.actor.params}
    teacher_weights = [t for t, _ in adapter_pairs(trainer.bundle.policy, POLICY_ADAPTER, TEACHER_ADAPTER)]
    assert bool(teacher_weights) == (teacher == "ema")
    assert all(not t.requires_grad and id(t) not in optimised for t in teacher_weights)


def test_the_ema_teacher_averages_the_adapter_matrix_by_matrix_and_stays_out_of_the_published_adapter(
    tiny_model_dir, tmp_path
):
    res = train(
        _sd_cfg(teacher="ema", ema_rate=0.25),
        tiny_model_dir,
        _prompts(),
        tmp_path / "run",
        reward_source=CriticSource(EdgeWordsCritic()),
    )
    assert not any(TEACHER_ADAPTER in k for k in _adapter(tmp_path / "run"))
    trainer = _trainer(tiny_model_dir, tmp_path / "t", teacher="ema")
    _perturb(trainer)
    pairs = adapter_pairs(trainer.bundle.policy, POLICY_ADAPTER, TEACHER_ADAPTER)
    before = [(t.clone(), p.clone()) for t, p in pairs]
    ema_adapter(trainer.bundle.policy, 0.25)
    for (t, _), (t0, p0) in zip(pairs, before, strict=True):
        assert torch.allclose(t, 0.75 * t0 + 0.25 * p0)
    assert res.history[-1]["time/teacher"] > 0


# --------------------------------------------------------------------- the student never sees the critique
def test_the_critique_never_enters_the_students_context_old_log_probs_or_kl(tiny_model_dir, tmp_path, monkeypatch):
    seen: list[tuple] = []
    original = trainer_module.old_ref_values

    def spy(model, ro, cfg, device, first=None):
        out = original(model, ro, cfg, device, first)
        seen.append((ro.query_ids.clone(), ro.response_ids.clone(), out[0].clone(), out[1].clone()))
        return out

    monkeypatch.setattr(trainer_module, "old_ref_values", spy)
    source = CriticSource(EdgeWordsCritic())
    runs = {}
    for name, cfg in (
        ("plain", _cfg(steps=1)),
        ("sd", _cfg(steps=1, self_distillation=SD | {"teacher": "reference", "top_k": 4})),
    ):
        seen.clear()
        runs[name] = (train(cfg, tiny_model_dir, _prompts(), tmp_path / name, reward_source=source).history[0], seen[0])
    (plain, (q0, r0, old0, ref0)), (sd, (q1, r1, old1, ref1)) = runs["plain"], runs["sd"]
    assert torch.equal(q0, q1) and torch.equal(r0, r1)  # the student's input ids: the prompt alone
    assert torch.equal(old0, old1) and torch.equal(ref0, ref1)  # its stored old log-probs and the reference's
    assert sd["kl/mean"] == plain["kl/mean"]  # its KL to the reference
    assert sd["sd/critiqued"] == 1.0 and sd["sd/ratio"] != 0 and "sd/credit" not in plain


# --------------------------------------------------------------------------------- every estimator takes it
@pytest.mark.parametrize("estimator", ["gae", "span_local", "span_bootstrap", "rloo", "grpo"])
def test_every_estimator_credits_the_term_as_a_dense_reward_without_moving_the_span_segments(estimator):
    """The term joins the rewards, never the task signal s_t: span_local's segments stay the spans', and each
    estimator, linear in the rewards, credits it as it credits the KL penalty: A(r + w g) = A(r) + A(w g; V = 0)."""
    torch.manual_seed(0)
    b, t = 4, 7
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[1, 5:] = False
    task = torch.zeros(b, t)
    task[:, 2:4], task[:, 5] = 1.0, -1.0
    task = task * mask
    values, group = torch.randn(b, t) * mask, torch.tensor([0, 0, 1, 1])
    rewards = task - 0.05 * torch.rand(b, t) * mask
    labels = task.clone()
    teaching = type("T", (), {})()
    teaching.ratio, teaching.kl = torch.randn(b, t) * mask, None
    teaching.critiqued, teaching.cfg = torch.ones(b, dtype=torch.bool), SelfDistillation(mode="add", weight=0.5)
    with_sd, own, _ = distillation_rewards(teaching, rewards, labels, mask)
    term = with_sd - rewards
    assert term.abs().sum() > 0 and not own.any()
    kw = dict(task=task, terminal=None, group=group, gamma=1.0, lam=0.95)
    a, r = estimate_advantages(estimator, with_sd, values, mask, **kw)
    a0, r0 = estimate_advantages(estimator, rewards, values, mask, **kw)
    a_term, _ = estimate_advantages(estimator, term, torch.zeros_like(values), mask, **kw)
    assert torch.allclose(a, a0 + a_term, atol=1e-5)
    assert torch.isfinite(a).all() and torch.isfinite(r).all()
    # had the term entered s_t, almost every token would start a segment and span_local would credit token by token
    assert segment_starts(task, mask).sum() < segment_starts(task + term, mask).sum()
    # the own-token term (top-k) reaches the token's advantage alone, never a return
    cfg = PPOConfig(advantage_estimator=estimator, group_size=2 if estimator in ("rloo", "grpo") else 1, batch_size=4)
    own = torch.zeros(b, t)
    own[0, 3] = 5.0
    plain_a, plain_r = advantages_and_returns(with_sd, values, mask, task, torch.zeros(b), group, cfg)
    own_a, own_r = advantages_and_returns(with_sd, values, mask, task, torch.zeros(b), group, cfg, own)
    assert torch.equal(plain_r, own_r) and own_a[0, 3] > plain_a[0, 3]


# ------------------------------------------------------------------------------------------ resume
@pytest.mark.slow  # trains PPO twice
def test_resume_with_an_ema_teacher_equals_the_uninterrupted_run(tiny_model_dir, tmp_path):
    cfg = _cfg(steps=4, save_every=2, self_distillation={"mode": "add", "teacher": "ema", "ema_rate": 0.5, "top_k": 3})
    source = CriticSource(EdgeWordsCritic())
    full = train(cfg, tiny_model_dir, _prompts(6), tmp_path / "full", reward_source=source)
    train(cfg, tiny_model_dir, _prompts(6), tmp_path / "cut", reward_source=source, stop_after=2)
    resumed = train(cfg, tiny_model_dir, _prompts(6), tmp_path / "cut", reward_source=source, resume=True)
    a, b = _adapter(tmp_path / "full"), _adapter(tmp_path / "cut")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    for h_full, h_res in zip(full.history, resumed.history, strict=True):
        for key in ("loss/policy", "sd/ratio", "sd/credit"):
            assert h_full[key] == pytest.approx(h_res[key], abs=1e-6), key
    teachers = [
        torch.load(tmp_path / run / "checkpoints" / "step-000004" / "trainer.pt", weights_only=False)["teacher_adapter"]
        for run in ("full", "cut")
    ]
    assert teachers[0].keys() == teachers[1].keys() and teachers[0]
    for k in teachers[0]:
        assert torch.allclose(teachers[0][k], teachers[1][k], atol=1e-6), k
