"""The on-policy critique loop (``t2g_core.ppo.critique_loop``): which rollouts a round sends to the annotator, how
agreement is measured, and, in PPO on a tiny model, that an alarm rolls back or stops the run, a refresh swaps the
reward model, and a resumed run reproduces the uninterrupted one."""

from __future__ import annotations

import pytest
import torch

from t2g_core.config import AlignConfig, AnnotateConfig, PPOConfig
from t2g_core.config.critique_loop import CritiqueLoopConfig
from t2g_core.ppo.critique_loop import CritiqueLoop, agreement, choose, feedback_frame, write_replay
from t2g_core.spans import ParsedFeedback
from tests.core._taggers import demo_tagger, tagger_cfg
from tests.core._tokenizers import byte_level_bpe

torch.set_num_threads(1)


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
    loop_cfg = CritiqueLoopConfig(enabled=True, every=every, first=first, budget=2)
    cfg = PPOConfig(steps=10, batch_size=4, critique_loop=loop_cfg)
    loop = CritiqueLoop(cfg, AnnotateConfig(annotator="reference"), tagger_cfg(), AlignConfig(), tmp_path, None)
    assert [step + 1 for step in range(cfg.steps) if loop.due(step)] == rounds  # steps done when a round runs
    assert loop.rounds_planned == len(rounds)


def test_low_agreement_rolls_back_only_when_the_annotator_sees_no_gain(tmp_path):
    # measured on the demo: rounds after a fast improvement found the reward model disagreeing on a policy the
    # annotator judged far better, and the floor alone rolled 5 steps of progress back
    def alarm(passed_reward, annotator_reward, poor_f1=0.1, **loop):
        cfg = PPOConfig(steps=10, batch_size=4, critique_loop=CritiqueLoopConfig(enabled=True, budget=2, **loop))
        crit = CritiqueLoop(cfg, AnnotateConfig(annotator="reference"), tagger_cfg(), AlignConfig(), tmp_path, None)
        crit.state.passed_reward = passed_reward
        return crit._alarm(
            {"poor_f1": poor_f1, "f1": poor_f1, "omission_recall": 1.0, "annotator_reward": annotator_reward}
        )

    assert not alarm(5.0, 7.0)  # the annotator judges the policy better: refresh, keep the progress
    assert alarm(5.0, 4.0) and alarm(5.0, 5.0)  # the proxy followed, the truth no better: over-optimisation
    assert alarm(None, 7.0)  # no earlier round: the floor alone decides
    assert alarm(5.0, 7.0, alarm_gain_check=False)
    assert not alarm(5.0, 4.0, poor_f1=0.9)  # agreement above the floor: no alarm whatever the reward


def test_with_a_noise_margin_only_a_shortfall_beyond_the_noise_of_the_two_means_rolls_back(tmp_path):
    # measured on SmolLM2: the bar (the warm start's mean over 8 rollouts) was 3.1 and a round 2.6 below it rolled
    # back a policy whose held-out error had fallen from 0.44 to 0.33
    def loop(noise: float) -> CritiqueLoop:
        loop_cfg = CritiqueLoopConfig(enabled=True, budget=2, alarm_gain_noise=noise)
        cfg = PPOConfig(steps=10, batch_size=4, critique_loop=loop_cfg)
        crit = CritiqueLoop(cfg, AnnotateConfig(annotator="reference"), tagger_cfg(), AlignConfig(), tmp_path, None)
        crit._set_bar(0, True, {"annotator_reward": 3.0, "annotator_reward_se": 1.5})
        return crit

    def alarm(crit: CritiqueLoop, reward: float, se: float) -> tuple[bool, float]:
        metrics = {"poor_f1": 0.1, "omission_recall": 1.0, "annotator_reward": reward, "annotator_reward_se": se}
        return crit._alarm(metrics), metrics["annotator_gain_margin"]

    one = loop(1.0)
    assert one.state.passed_reward_se == 1.5
    assert alarm(one, 1.0, 1.5) == (False, pytest.approx(2.121, abs=1e-3))  # 2.0 below: within the noise
    assert alarm(one, -8.0, 1.5)[0]  # a hack the annotator charges for: far beyond the noise
    assert alarm(one, 1.0, 0.1) == (True, pytest.approx(1.503, abs=1e-3))  # the same shortfall measured precisely
    assert alarm(loop(0.0), 2.9, 1.5) == (True, 0.0)  # no margin: any shortfall, the default


def test_auto_runs_the_loop_only_where_it_works_offline_and_can_refresh():
    from t2g_core.config import load_config
    from t2g_core.config.stages import PPOSettings

    def loop(*sets):
        return PPOSettings.from_pipeline(load_config(None, list(sets))).critique_loop()

    assert loop() == (True, "auto: the trained tagger, audited by the annotator offline")  # the embedded defaults
    for sets, why in [
        (["annotate.annotator=llm"], "annotate.annotator=llm"),  # an outside service is called only when asked
        (["annotate.annotator=ground"], "annotate.annotator=ground"),  # human critiques cannot label new responses
        (["reward_model.kind=generative"], "cannot be refreshed"),
        (["ppo.reward_source=oracle"], "does not score with the reward model the pipeline trained"),
        (["ppo.reward_model_path=/some/tagger"], "does not score with the reward model the pipeline trained"),
    ]:
        on, reason = loop(*sets)
        assert not on and why in reason
    assert loop("ppo.critique_loop.enabled=true", "annotate.annotator=llm")[0]  # asked for: on
    assert PPOSettings.from_pipeline(
        load_config(None, ["ppo.critique_loop.enabled=true", "annotate.annotator=llm"])
    ).uses_annotator_key
    assert not loop("ppo.critique_loop.enabled=false")[0]
    assert not PPOSettings.from_pipeline(load_config(None, ["annotate.annotator=llm"])).uses_annotator_key


def test_chosen_rollouts_become_feedback_items_with_unique_ids():
    rows = [
        {"id": "p1", "task": "summarization", "prompt": "I am Gus.", "reference": "A person named Gus.", "meta": {}}
    ]
    frame = feedback_frame(rows * 2, ["named Gus", "named Bo"], 7, [1, 0])
    assert frame["id"].tolist() == ["p1@7.1", "p1@7.0"] and frame["response"].tolist() == ["named Bo", "named Gus"]
    assert frame["meta"].tolist() == ["{}", "{}"] and frame["critique"].isna().all()


def test_agreement_is_span_f1_and_omission_recall_against_the_annotator():
    tok = byte_level_bpe()
    text = "Lena lives in Hanoi, all mice colored brown, all mice colored brown."
    decoded = [
        (text, [tuple(o) for o in tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]])
    ]
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


# ------------------------------------------------------------------------------------------ the loop inside PPO
def _prompts(n=8):
    from t2g_core.demo import make_demo_feedback

    return make_demo_feedback("summarization", n, seed=1)


def _ppo(**loop) -> PPOConfig:
    settings = {
        "enabled": True,
        "every": 2,
        "first": None,
        "budget": 3,
        "refresh_steps": 2,
        "alarm_f1_floor": 0.0,
    } | loop
    return PPOConfig(
        steps=4,
        batch_size=4,
        minibatches=1,
        ppo_epochs=1,
        max_new_tokens=12,
        value_model="head",
        save_every=100,
        log_every=1,
        learning_rate=1e-2,
        critique_loop=CritiqueLoopConfig(**settings),
    )


# the module's tests share a worker: the tagger below is trained once, not once per worker
pytestmark = pytest.mark.xdist_group("critique-loop-tagger")


@pytest.fixture(scope="module")
def tagger(tiny_model_dir, tmp_path_factory):
    return demo_tagger(tiny_model_dir, tmp_path_factory.mktemp("tagger"), steps=40)  # labels good values


def _trainer(cfg, model_dir, run_dir, tagger):
    from t2g_core.ppo.sources import reward_model_source
    from t2g_core.ppo.trainer import PPOTrainer

    folder, rm_df, fb = tagger
    write_replay(run_dir, rm_df, fb)
    loop = CritiqueLoop(cfg, AnnotateConfig(annotator="reference"), tagger_cfg(), AlignConfig(), run_dir, folder)
    source = reward_model_source(folder, tagger_cfg())
    return PPOTrainer(
        cfg, model_dir, _prompts(), run_dir, reward_source=source, align_cfg=AlignConfig(), critique_loop=loop
    )


def _adapter_weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _policy_weights(trainer):
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(trainer.bundle.policy).items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_an_alarm_rolls_the_policy_back_to_the_last_round_that_passed(tiny_model_dir, tmp_path, tagger):
    from t2g_core.tracking import MemoryTracker

    # F1 < 1 (the agreement of a tagger trained for seconds with the annotator): the alarm fires
    trainer = _trainer(_ppo(alarm_f1_floor=1.0, alarm_spans="all"), tiny_model_dir, tmp_path / "run", tagger)
    before: list[dict] = []
    restore = trainer.restore_weights
    trainer.restore_weights = lambda path: (before.append(_policy_weights(trainer)), restore(path))[1]
    calls = []
    result = trainer.fit(tracker=MemoryTracker(), stop_after=2, progress=lambda *a: calls.append(a))
    warm = _adapter_weights(tmp_path / "run" / "checkpoints" / "step-000000" / "adapter")
    assert result.history[1]["critic_loop/alarm"] == 1.0 and result.history[1]["critic_loop/rollback"] == 1.0
    assert len(before) == 1 and not _same(before[0], warm)  # two updates were taken
    assert _same(_policy_weights(trainer), warm)  # and undone
    f1 = result.history[1]["critic_loop/f1"]
    assert [c for c in calls if c[0] == "critique loop"] == [("critique loop", 1, 2, {"f1": f1, "alarm": 1.0})]
    assert result.reward_models and result.reward_models[0]["step"] == 1
    assert trainer.reward_source.path == tmp_path / "run" / "critique_loop" / "round-000" / "tagger"  # refreshed


@pytest.mark.slow
def test_on_alarm_stop_ends_the_run_with_the_passing_policy(tiny_model_dir, tmp_path, tagger):
    from t2g_core.tracking import NullTracker

    stop = _ppo(alarm_f1_floor=1.0, alarm_spans="all", on_alarm="stop")
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
