"""The on-policy critique loop (``t2g_core.critique_loop``), a plug-in of PPO's trainer: which rollouts a round sends
to the annotator and what their labels become, how agreement is measured (on the random share alone), the alarm's
paired gap test and its operating characteristics, and, in PPO on a tiny model, that an alarm restores the certified
policy the annotator rated best, that the certified checkpoint is the policy the panel audited, and that a resumed
run reproduces the uninterrupted one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t2g_core.config import AlignConfig, AnnotateConfig, PPOConfig
from t2g_core.config.critique_loop import CritiqueLoopConfig
from t2g_core.critique_loop import CritiqueLoop, write_replay
from t2g_core.critique_loop.alarm import GapTest, gap_test
from t2g_core.critique_loop.audit import agreement, choose, feedback_frame
from t2g_core.ppo.hooks import Batch, View
from t2g_core.spans import ParsedFeedback
from tests.core._taggers import demo_tagger, tagger_cfg
from tests.core._tokenizers import byte_level_bpe

torch.set_num_threads(1)


def _loop(tmp_path, prompts=(), **loop) -> CritiqueLoop:
    cfg = PPOConfig(steps=10, batch_size=4, critique_loop=CritiqueLoopConfig(**{"enabled": True, "budget": 2} | loop))
    return CritiqueLoop(
        cfg, AnnotateConfig(annotator="reference"), tagger_cfg(), AlignConfig(), tmp_path, None, list(prompts)
    )


# ------------------------------------------------------------------------------------------ choosing and agreeing
def test_a_round_takes_the_least_sure_rollouts_then_a_seeded_random_share():
    confidence = [0.9, 0.2, 0.95, 0.1, 0.8, 0.99, 0.7, 0.6]
    picked = choose(confidence, 4, 0.5, seed=0, step=9)
    assert picked[:2] == [3, 1]  # the two least sure, least sure first
    assert len(set(picked)) == 4 and not {3, 1} & set(picked[2:])
    assert picked == choose(confidence, 4, 0.5, seed=0, step=9)  # a function of (seed, step)
    draws = {tuple(choose(confidence, 4, 0.5, seed=0, step=s)[2:]) for s in range(20)}
    assert len(draws) > 1  # the random share changes with the step
    assert sorted(choose([None] * 8, 8, 0.5, seed=0, step=1)) == list(range(8))  # no confidence: all at random
    assert choose(confidence, 20, 1.0, seed=0, step=0) == sorted(range(8), key=lambda i: confidence[i])


@pytest.mark.parametrize(
    ("every", "first", "rounds"), [(3, None, [3, 6, 9]), (3, 1, [1, 4, 7, 10]), (5, 2, [2, 7]), (4, 12, [])]
)
def test_rounds_come_after_the_first_round_then_every_few_steps(tmp_path, every, first, rounds):
    loop = _loop(tmp_path, every=every, first=first)
    assert [step + 1 for step in range(10) if loop.due(step)] == rounds  # steps done when a round runs
    assert loop.rounds_planned == len(rounds)


def test_auto_runs_the_loop_only_where_it_works_offline_and_can_refresh():
    from t2g_core.config import load_config
    from t2g_core.config.stages import PPOSettings

    def settings(*sets):
        return PPOSettings.from_pipeline(load_config(None, list(sets)))

    assert settings().critique_loop() == (True, "auto: the trained tagger, audited by the annotator offline")
    for sets, why in [
        (["annotate.annotator=llm"], "annotate.annotator=llm"),  # an outside service is called only when asked
        (["annotate.annotator=ground"], "annotate.annotator=ground"),  # human critiques cannot label new responses
        (["reward_model.kind=generative"], "cannot be refreshed"),
        (["ppo.reward_source=oracle"], "does not score with the reward model the pipeline trained"),
        (["ppo.reward_model_path=/some/tagger"], "does not score with the reward model the pipeline trained"),
    ]:
        on, reason = settings(*sets).critique_loop()
        assert not on and why in reason
    on = settings("ppo.critique_loop.enabled=true", "annotate.annotator=llm")
    assert on.critique_loop()[0] and on.uses_annotator_key
    assert settings().critique_loop(processes=2) == (False, "auto: 2 processes (the loop runs in one)")
    with pytest.raises(ValueError, match="runs in one process"):
        settings("ppo.critique_loop.enabled=true").critique_loop(processes=2)
    assert not settings("ppo.critique_loop.enabled=false").critique_loop()[0]
    assert not settings("annotate.annotator=llm").uses_annotator_key


def test_the_annotator_is_in_ppos_cache_key_only_while_the_loop_is_on():
    from t2g_core.config import load_config
    from t2g_core.stages.context import fingerprint
    from t2g_core.stages.registry import settings_for

    def key(*sets):
        return fingerprint({"settings": settings_for("ppo", load_config(None, list(sets)))})

    oracle = "ppo.reward_source=oracle"
    assert key(oracle) == key(
        oracle, "annotate.prompt_version=v2"
    )  # the loop is off: annotation settings re-run nothing
    assert key() != key("annotate.prompt_version=v2")  # on: the annotator labels PPO's rollouts


def test_chosen_rollouts_become_feedback_items_with_unique_ids():
    rows = [
        {"id": "p1", "task": "summarization", "prompt": "I am Gus.", "reference": "A person named Gus.", "meta": {}}
    ]
    frame = feedback_frame(rows * 2, ["named Gus", "named Bo"], "7", [1, 0])
    assert frame["id"].tolist() == ["p1@7.1", "p1@7.0"] and frame["response"].tolist() == ["named Bo", "named Gus"]
    assert frame["meta"].tolist() == ["{}", "{}"] and frame["critique"].isna().all()


def _decoded(tok, texts):
    enc = tok(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    return [(t, [tuple(o) for o in offs]) for t, offs in zip(texts, enc["offset_mapping"], strict=True)]


def test_agreement_is_span_f1_and_omission_recall_against_the_annotator():
    tok = byte_level_bpe()
    text = "Lena lives in Hanoi, all mice colored brown, all mice colored brown."
    decoded = _decoded(tok, [text])
    annotator = ParsedFeedback(
        "It repeats itself.",
        ["Lena", "Hanoi"],
        ["all mice colored brown."],
        missing=("the job",),
        missing_at=(len(text),),
    )
    same = agreement(decoded, [annotator], [annotator], tok, AlignConfig(), 1.0)
    assert same["f1"] == 1.0 and same["omission_recall"] == 1.0 and same["rm_reward"] == same["annotator_reward"]
    farmed = ParsedFeedback(
        "", located=((0, 4, "positive"), (14, 19, "positive"), (21, 43, "positive"), (45, 67, "positive"))
    )
    differ = agreement(decoded, [farmed], [annotator], tok, AlignConfig(repeated_good_spans="each"), 1.0)
    assert differ["f1"] == pytest.approx(4 / 7)  # 2 of its 4 spans are the annotator's 3: P 1/2, R 2/3
    assert differ["omission_recall"] == 0.0 and differ["poor_f1"] == 0.0
    assert differ["rm_reward"] > differ["annotator_reward"]  # the reward model pays what the annotator charges


def test_audited_rollouts_take_the_annotators_labels_and_agreement_reads_the_random_share_alone(tmp_path):
    """Before, the alarm's F1 was measured on a budget half of which the reward model was least sure about (a biased
    sample), and the annotator's labels never became the audited rollouts' reward."""
    from t2g_core.demo import make_demo_feedback
    from t2g_core.ppo.rollout import row_dict

    tok = byte_level_bpe()
    rows = [row_dict(r) for _, r in make_demo_feedback("summarization", 4, seed=5).iterrows()]
    texts = [r["reference"] for r in rows]
    unsure = ParsedFeedback("", ["named"], [], confidence=0.1)  # the least sure: chosen, but not agreement's sample
    sure = [ParsedFeedback("", [t.split()[3]], [], confidence=0.9 + i / 100) for i, t in enumerate(texts)]
    feedback = [unsure, *sure[1:]]
    loop = _loop(tmp_path, budget=2, uncertain_share=0.5)
    view = View(tok, None, None, str)
    relabelled = loop.relabel(3, Batch(rows, _decoded(tok, texts), feedback), view)
    picked = choose([fb.confidence for fb in feedback], 2, 0.5, seed=0, step=3)
    assert picked[0] == 0 and loop.state.audit["annotated"] == 2.0
    for i in range(4):
        assert (relabelled[i] is feedback[i]) == (i not in picked)  # the annotator's labels are the reward now
    random_only = agreement(
        _decoded(tok, [texts[picked[1]]]), [feedback[picked[1]]], [relabelled[picked[1]]], tok, AlignConfig(), 1.0
    )
    assert loop.state.audit["f1"] == random_only["f1"]


# ------------------------------------------------------------------------------------------ the alarm
def test_the_gap_test_compares_each_prompts_gap_with_the_warm_starts_on_the_same_prompt():
    same = gap_test([1.0, -2.0, 3.0, 0.5], [1.0, -2.0, 3.0, 0.5], rounds_planned=4, false_rate=0.05)
    assert same.t == 0.0 and not same.alarm
    shifted = gap_test([3.0, 0.5, 5.5, 2.0], [1.0, -2.0, 3.0, 0.5], rounds_planned=4, false_rate=0.05)
    # paired: d = (2, 2.5, 2.5, 1.5), mean 2.125, sd sqrt(0.6875 / 3), over sqrt(4)
    assert shifted.t == pytest.approx(2.125 / ((0.6875 / 3) ** 0.5 / 2)) and shifted.alarm
    unpaired_noise = gap_test([3.0, -2.0, 3.0, 0.5], [1.0, -2.0, 3.0, -1.5], rounds_planned=4, false_rate=0.05)
    assert not unpaired_noise.alarm
    from scipy.stats import t as student_t

    assert same.threshold == pytest.approx(student_t.ppf(1 - 0.05 / 4, 3))  # Bonferroni over the planned rounds
    assert GapTest(1.0, 0.0, 3.0, 2.0).metrics()["alarm"] == 1.0


def _simulated_runs(runs: int, rounds: int, n: int, decline_se: float, seed: int) -> np.ndarray:
    """The round at which each simulated run's first alarm fires (0: never), with the shipped gap test. Each panel
    prompt has its own level (the reward model and the annotator disagree more on some prompts), each response noise
    of 4 reward points (as on SmolLM2); a real decline lowers the annotator's reward by ``decline_se`` standard
    errors of a round's mean per round, while the reward model pays as before."""
    rng = np.random.default_rng(seed)
    sigma = 4.0
    se = sigma / np.sqrt(n)
    first = np.zeros(runs, dtype=int)
    for run in range(runs):
        level = rng.normal(0, 3, n)
        start = level + rng.normal(0, sigma, n)
        for r in range(1, rounds + 1):
            now = level + r * decline_se * se + rng.normal(0, sigma, n)
            if gap_test(now.tolist(), start.tolist(), rounds, 0.05).alarm:
                first[run] = r
                break
    return first


def test_the_alarm_raises_few_false_alarms_and_catches_a_real_decline_by_round_four():
    """Measured with the old rule (unpaired means over 8 rollouts, the bar reset after every passing round): 46% of
    runs rolled back at least once in rounds 2-4 with nothing changing (96% without the noise margin), and a decline of
    1.5 SE per round was caught by round 4 in 52%. The goals: at most 5% and at least 80%."""
    null = _simulated_runs(2000, rounds=4, n=16, decline_se=0.0, seed=0)
    assert (null > 0).mean() <= 0.05
    decline = _simulated_runs(1000, rounds=4, n=16, decline_se=1.5, seed=1)
    assert ((decline > 0) & (decline <= 4)).mean() >= 0.80


# ------------------------------------------------------------------------------------------ the loop inside PPO
def _prompts(n=8):
    from t2g_core.demo import make_demo_feedback

    return make_demo_feedback("summarization", n, seed=1)


def _ppo(**loop) -> PPOConfig:
    settings = {"enabled": True, "every": 2, "first": None, "budget": 3, "panel": 4, "refresh_steps": 2} | loop
    return PPOConfig(
        steps=4,
        batch_size=4,
        minibatches=1,
        ppo_epochs=1,
        sampling={"max_new_tokens": 12},
        value_model="head",
        save_every=100,
        log_every=1,
        learning_rate=1e-2,
        critique_loop=CritiqueLoopConfig(**settings),
    )


@pytest.fixture(scope="module")
def tagger(tiny_model_dir, tmp_path_factory):
    return demo_tagger(tiny_model_dir, tmp_path_factory.mktemp("tagger"), steps=40)  # labels good values


def _trainer(cfg, model_dir, run_dir, tagger):
    from t2g_core.ppo.rollout import row_dict
    from t2g_core.ppo.sources import reward_model_source
    from t2g_core.ppo.trainer import PPOTrainer

    folder, rm_df, fb = tagger
    write_replay(run_dir, rm_df, fb)
    rows = [row_dict(r) for _, r in _prompts().iterrows()]
    loop = CritiqueLoop(cfg, AnnotateConfig(annotator="reference"), tagger_cfg(), AlignConfig(), run_dir, folder, rows)
    source = reward_model_source(folder, tagger_cfg())
    return PPOTrainer(cfg, model_dir, _prompts(), run_dir, reward_source=source, align_cfg=AlignConfig(), hook=loop)


def _adapter_weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _policy_weights(trainer):
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(trainer.bundle.policy).items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def alarm_at(monkeypatch):
    """Make the gap test alarm at the given rounds (the mechanics of an alarm, not its statistics, are tested)."""
    import t2g_core.critique_loop as loop_module

    def set_rounds(*rounds):
        calls = []

        def fake(gaps, start_gaps, planned, rate):
            calls.append(1)
            return GapTest(0.0, 0.0, 10.0 if len(calls) in rounds else -10.0, 1.0)

        monkeypatch.setattr(loop_module, "gap_test", fake)

    return set_rounds


@pytest.mark.slow
def test_an_alarm_restores_the_certified_policy_the_annotator_rated_best(tiny_model_dir, tmp_path, tagger, alarm_at):
    from t2g_core.tracking import MemoryTracker

    alarm_at(2)  # the second round (after step 3) alarms
    trainer = _trainer(_ppo(), tiny_model_dir, tmp_path / "run", tagger)
    result = trainer.fit(tracker=MemoryTracker())
    history = {h["step"]: h for h in result.history}
    assert history[1]["critique_loop/alarm"] == 0.0 and history[3]["critique_loop/alarm"] == 1.0
    certified = trainer.hook.state.certified
    assert [c["checkpoint"] for c in certified] == ["step-000000", "step-000002"]  # the warm start, round 1's policy
    best = max(certified, key=lambda c: c["annotator_reward"])
    assert history[3]["critique_loop/rollback"] == best["step"]
    restored = _adapter_weights(tmp_path / "run" / "checkpoints" / best["checkpoint"] / "adapter")
    assert _same(_policy_weights(trainer), restored)  # the run ended on the restored policy
    assert len(result.reward_models) == 2 and trainer.reward_source.path.parent.name == "round-001"  # refreshed


@pytest.mark.slow
def test_the_certified_checkpoint_is_the_policy_the_panel_audited(tiny_model_dir, tmp_path, tagger):
    """Before, a round audited rollouts sampled before step s's update and certified the checkpoint written after it:
    a rollback target carried one unaudited update."""
    from t2g_core.tracking import NullTracker

    trainer = _trainer(_ppo(refresh_steps=0), tiny_model_dir, tmp_path / "run", tagger)
    audited = []
    sample = trainer.sample
    trainer.sample = lambda rows: (audited.append(_policy_weights(trainer)), sample(rows))[1]
    trainer.fit(tracker=NullTracker())
    certified = trainer.hook.state.certified
    assert len(audited) == len(certified) == 3  # the warm start and two passing rounds
    for weights, entry in zip(audited, certified, strict=True):
        saved = _adapter_weights(tmp_path / "run" / "checkpoints" / entry["checkpoint"] / "adapter")
        assert _same(weights, saved), entry


@pytest.mark.slow
def test_on_alarm_stop_ends_the_run_with_the_best_certified_policy(tiny_model_dir, tmp_path, tagger, alarm_at):
    from t2g_core.tracking import NullTracker

    alarm_at(1)
    stop = _ppo(on_alarm="stop")
    trainer = _trainer(stop, tiny_model_dir, tmp_path / "run", tagger)
    result = trainer.fit(tracker=NullTracker())
    assert result.steps_done == 2 and len(result.history) == 2 and not result.reward_models
    warm = _adapter_weights(tmp_path / "run" / "checkpoints" / "step-000000" / "adapter")
    assert _same(_adapter_weights(result.adapter_dir), warm)
    again = _trainer(stop, tiny_model_dir, tmp_path / "run", tagger)
    assert again.restore() and again.fit(tracker=NullTracker()).steps_done == 2  # a stopped run stays stopped


@pytest.mark.slow
def test_a_resumed_run_with_the_loop_reproduces_the_uninterrupted_one(tiny_model_dir, tmp_path, tagger):
    from safetensors.torch import load_file

    from t2g_core.tracking import NullTracker

    full = _trainer(_ppo(), tiny_model_dir, tmp_path / "full", tagger).fit(tracker=NullTracker())
    _trainer(_ppo(), tiny_model_dir, tmp_path / "cut", tagger).fit(tracker=NullTracker(), stop_after=3)
    resumed_trainer = _trainer(_ppo(), tiny_model_dir, tmp_path / "cut", tagger)
    assert resumed_trainer.restore() and resumed_trainer.next_step == 3
    resumed = resumed_trainer.fit(tracker=NullTracker())
    assert len(full.reward_models) == len(resumed.reward_models) == 2
    assert _same(_adapter_weights(full.adapter_dir), _adapter_weights(resumed.adapter_dir))
    for a, b in zip(full.reward_models, resumed.reward_models, strict=True):
        assert (a["round"], a["step"]) == (b["round"], b["step"])
        assert _same(load_file(f"{a['folder']}/head.safetensors"), load_file(f"{b['folder']}/head.safetensors"))

    def kept(h):
        return {k: v for k, v in h.items() if not k.startswith("time/") and not k.endswith("seconds")}

    assert [kept(h) for h in full.history] == [kept(h) for h in resumed.history]
