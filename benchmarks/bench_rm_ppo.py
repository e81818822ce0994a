"""The paper's loop on the demo: PPO driven by a learned reward model against PPO driven by the ideal critic.

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from testbed import (
    RM_SMOKE_OVERRIDES,
    RM_SMOKE_WORK,
    KeptResponses,
    NoisyCritic,
    curves,
    fact_profile,
    key_of,
    parser,
    results_dir,
    run_in_processes,
    run_spec_file,
    stay_offline,
    train_evaluated,
    write_results,
)
from testbed.rm_ppo_report import FRACTIONS, contrasts, oracle_shares, print_report, split_arm, summarise

from t2g_core.config import load_config
from t2g_core.config.stages import PolicySamplesSettings
from t2g_core.demo import make_demo_feedback
from t2g_core.evaluation import sample_efficiency as se
from t2g_core.evaluation.diagnosis import poor_span_agreement
from t2g_core.reward_model.data import build_rm_data
from t2g_core.reward_model.train import train_rm
from t2g_core.stages.context import StageContext
from t2g_core.stages.policy_samples import sample_responses, samples_frame

stay_offline()
TAGGER = {"kind": "tagger", "init_from": "policy"}


@dataclass(frozen=True)
class Source:
    reward_source: str  # PPOConfig.reward_source
    reward_model: dict | None = None  # reward_model settings of the reward model trained for it (None: no model)
    flip: float = 0.0  # share of span labels flipped, omissions dropped (testbed.NoisyCritic)
    needs: str | None = None  # a PPOConfig section the arm turns on (its settings come from --refresh-set)
    sets: list[str] = field(default_factory=list)  # pipeline overrides of this arm alone
    annotator_flip: float = 0.0  # the same noise on the critique loop's annotator (testbed.noisy_annotator)
    matched: bool = False  # the tagger also trained on --matched-labels labelled warm-start samples, one per seed


SOURCES = {
    "oracle": Source("oracle"),
    "tagger": Source("reward_model", TAGGER),
    "ensemble": Source("reward_model", TAGGER | {"tagger_heads": 5}),  # the heads' disagreement shrinks rewards
    "generative": Source("reward_model", {"kind": "generative"}),
    "noisy": Source("oracle", flip=0.2),
    "refreshed": Source("reward_model", TAGGER, needs="critique_loop"),
    "matched": Source("reward_model", TAGGER, matched=True),
    "refreshed_noisy": Source("reward_model", TAGGER, needs="critique_loop", annotator_flip=0.2),
    "refreshed_matched": Source("reward_model", TAGGER, needs="critique_loop", matched=True),
}
ESTIMATORS = {"gae": {"advantage_estimator": "gae"}, "span_local": {"advantage_estimator": "span_local"}}
SUMMARY_SETTINGS = ("seeds", "steps", "arms", "estimators", "n_eval", "overrides", "refresh_set", "policy")
SUMMARY_SETTINGS += ("matched_labels",)
ARM_EXTRA = ("score_share", "final_error", "seconds_per_run")  # per arm, beside curves.arm_row


def sources(args) -> dict[str, Source]:
    """The sources ``--arms`` names, each checked to be runnable before any work starts."""
    out = {}
    for name in args.arms.split(","):
        if name not in SOURCES:
            raise SystemExit(f"--arms: unknown reward source {name!r}; expected one of {', '.join(SOURCES)}")
        src = SOURCES[name]
        if src.needs:
            if not any(s.startswith(f"ppo.{src.needs}") for s in args.refresh_set):
                raise SystemExit(f"arm {name}: pass its loop settings with --refresh-set ppo.{src.needs}...=VALUE")
            src = dataclasses.replace(src, sets=[f"ppo.{src.needs}.enabled=true", *args.refresh_set])
            try:  # a loop setting PPOConfig refuses (a budget over the batch) stops here, before any work
                _pipeline(args, src)
            except ValueError as exc:
                raise SystemExit(f"arm {name}: {exc}") from exc
        out[name] = src
    return out


def _pipeline(args, src: Source | None = None):
    return load_config(None, [*(RM_SMOKE_OVERRIDES if args.smoke else []), *args.overrides, *(src.sets if src else [])])


def prepare(args, srcs: dict[str, Source]) -> dict[str, str]:
    """The demo's warm-started policy and a reward model of each kind the sources need (``--reward-models`` reuses
    trained ones), keyed ``policy`` and by kind, the label-matched taggers by ``matched<seed>``; the tagger is always
    trained (the drift curve is scored by it)."""
    import torch

    torch.set_num_threads(args.threads)
    from t2g_core.annotators import annotate
    from t2g_core.models.demo_build import ensure_demo_models

    pipe, work = _pipeline(args), Path(args.workdir)
    given = dict(kv.split("=", 1) for kv in args.reward_models.split(",") if kv)
    fb = make_demo_feedback("summarization", pipe.data.n_items, seed=pipe.data.seed)
    if args.policy:
        models = type("Models", (), {"policy": Path(args.policy), "base": Path(args.base or args.policy)})
    else:  # smoke: bench_rm --smoke's models when it built them (same settings and data: the same key)
        models = ensure_demo_models((RM_SMOKE_WORK if args.smoke else work) / "models", pipe.models, fb, progress=False)
    ann = annotate(fb, pipe.annotate.model_copy(update={"annotator": "reference"}), progress=False).frame
    out = {"policy": str(models.policy)}
    kinds = {rm_key(TAGGER): TAGGER} | {rm_key(s.reward_model): s.reward_model for s in srcs.values() if s.reward_model}
    for kind, settings in kinds.items():
        start = models.policy if pipe.reward_model.model_copy(update=settings).init_from == "policy" else models.base
        out[kind] = given.get(kind) or fit_reward_model(pipe, settings, start, fb, ann, work / f"rm-{kind}")
    if any(s.matched for s in srcs.values()):
        for seed in range(args.seeds):
            samples, labels = warm_start_labels(args, pipe, str(models.policy), seed)
            folder = work / f"rm-matched-{key_of([args.matched_labels, seed, out['policy'], args.overrides])}"
            both = pd.concat([fb, samples], ignore_index=True), pd.concat([ann, labels], ignore_index=True)
            out[f"matched{seed}"] = fit_reward_model(pipe, TAGGER, models.policy, *both, folder, set(samples["id"]))
    if any(s.needs == "critique_loop" for s in srcs.values()):  # what a refresh replays: the tagger's own training rows
        from transformers import AutoTokenizer

        from t2g_core.critique_loop import LOOP_DIR, write_replay

        cfg = pipe.reward_model.model_copy(update=TAGGER)
        rm_df, _ = build_rm_data(fb, ann, AutoTokenizer.from_pretrained(str(models.policy)), cfg, align_cfg=pipe.align)
        write_replay(work / "replay", rm_df, fb)
        out["replay"] = str(work / "replay" / LOOP_DIR)
    return out


def rm_key(settings: dict | None) -> str | None:
    """The reward model an arm's settings name: its kind, with its number of span heads when above one."""
    heads = (settings or {}).get("tagger_heads", 1)
    return settings["kind"] + (f"-heads{heads}" if heads > 1 else "") if settings else None


def fit_reward_model(pipe, settings: dict, start, fb, ann, folder: Path, train_ids: set[str] = frozenset()) -> str:
    """A reward model (``settings`` over ``reward_model``'s) trained on the items ``fb`` labelled ``ann`` as the
    pipeline trains it, the items ``train_ids`` in its training split whatever their id; its folder."""
    from transformers import AutoTokenizer

    from t2g_core.reward_model.tagger_train import fit_tagger, tagger_examples

    cfg = pipe.reward_model.model_copy(update=settings)
    rm_df, _ = build_rm_data(fb, ann, AutoTokenizer.from_pretrained(str(start)), cfg, align_cfg=pipe.align)
    rm_df.loc[rm_df["id"].isin(train_ids), "split"] = "train"
    t0 = time.perf_counter()
    if cfg.kind == "tagger":
        res = fit_tagger(cfg, start, tagger_examples(rm_df, fb), folder, overlap=pipe.align.overlap)
    else:
        res = train_rm(cfg, start, rm_df, folder, progress=False)
    print(f"reward model {folder.name}: {res.adapter_dir} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return str(res.adapter_dir)


def ppo_prompts(args):
    """The prompts PPO trains on (the held-out ones are another seed's)."""
    return make_demo_feedback("summarization", 32 if args.smoke else 768, seed=1)


def matched_labels(args) -> int:
    """How many labels the refreshed arm's loop gathers for a refresh in a run: ``budget`` x its planned rounds."""
    loop = _pipeline(args, Source("", sets=args.refresh_set)).ppo.critique_loop
    return loop.budget * loop.rounds(args.steps)


def warm_start_labels(args, pipe, policy: str, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``--matched-labels`` of PPO's prompts drawn by ``seed``, one response each sampled from the warm start as the
    policy-samples stage samples them (PPO's sampling, the seed), as feedback rows, and the reference annotator's
    labels of them."""
    from t2g_core.annotators import annotate

    prompts = ppo_prompts(args)
    if args.matched_labels > len(prompts):
        raise SystemExit(f"--matched-labels {args.matched_labels}: more than the {len(prompts)} PPO prompts")
    rows = prompts.sample(n=args.matched_labels, random_state=seed).sort_index().reset_index(drop=True)
    settings = PolicySamplesSettings.from_pipeline(pipe)
    own = {"prompts": args.matched_labels, "per_prompt": 1, "seed": seed}
    settings = settings.model_copy(update={"policy_samples": settings.policy_samples.model_copy(update=own)})
    ctx = StageContext.at_path(args.workdir, "matched", Path(args.workdir) / "matched")
    samples = samples_frame(rows, sample_responses(policy, rows, settings, ctx))
    labels = annotate(samples, pipe.annotate.model_copy(update={"annotator": "reference"}), progress=False).frame
    return samples, labels


# ----------------------------------------------------------------------------------------------------------------
# one run
# ----------------------------------------------------------------------------------------------------------------


def eval_steps(args) -> list[int]:
    drift = [s for s in args.drift_steps if s > 0]
    return sorted({*se.eval_schedule(args.steps, args.eval_every, args.dense_evals), *drift})


def critique_loop(cfg, pipe, paths: dict, out: Path, prompts, flip: float, tagger: str):
    """A loop arm's loop, fresh in ``out``: the reference annotator (``flip`` of its span labels flipped, no omissions)
    audits ``tagger`` on the arm's rollouts; each refresh replays the static tagger's training rows."""
    from testbed.noisy_annotator import NoisyAnnotatorLoop

    from t2g_core.critique_loop import LOOP_DIR, CritiqueLoop
    from t2g_core.ppo.rollout import row_dict

    shutil.rmtree(out / LOOP_DIR, ignore_errors=True)
    shutil.copytree(paths["replay"], out / LOOP_DIR)
    annotate_cfg = pipe.annotate.model_copy(update={"annotator": "reference"})
    rm_cfg = pipe.reward_model.model_copy(update=TAGGER)
    rows = [row_dict(r) for _, r in prompts.iterrows()]
    args = (cfg, annotate_cfg, rm_cfg, pipe.align, out, tagger, rows)
    return NoisyAnnotatorLoop(*args, flip=flip) if flip else CritiqueLoop(*args)


def reward_model_at(refreshed: list[dict], drift_steps: list[int]) -> dict[str, str]:
    """{steps trained: the refreshed tagger PPO scored with after that many steps} for the drift steps after the first
    refresh (a refresh after step index k scores from step k + 1 on)."""
    done = {steps: [r["folder"] for r in refreshed if r["step"] < steps] for steps in drift_steps}
    return {str(steps): folders[-1] for steps, folders in done.items() if folders}


def run_arm(args, paths: dict, srcs: dict[str, Source], arm: str, seed: int, out: Path) -> dict:
    """One (arm, seed) PPO run: warm-start and scheduled held-out evaluations, responses kept at the drift steps."""
    from t2g_core.ppo.sources import make_reward_source, summary_metrics
    from t2g_core.ppo.trainer import PPOTrainer

    name, estimator = split_arm(arm)
    src = srcs[name]
    pipe = _pipeline(args, src)
    update = {"steps": args.steps, "seed": seed, "reward_source": src.reward_source} | ESTIMATORS[estimator]
    cfg = type(pipe.ppo).model_validate(pipe.ppo.model_dump() | update)
    prompts = ppo_prompts(args)
    eval_df = make_demo_feedback("summarization", args.n_eval, seed=2)
    metric = KeptResponses(summary_metrics)
    rm_path = paths[f"matched{seed}"] if src.matched else paths.get(rm_key(src.reward_model))
    rm_cfg = pipe.reward_model.model_copy(update=src.reward_model or {})
    source = make_reward_source(src.reward_source, "summarization", reward_model_path=rm_path, rm_cfg=rm_cfg)
    source = NoisyCritic(source, src.flip, seed) if src.flip else source
    loop = critique_loop(cfg, pipe, paths, out, prompts, src.annotator_flip, rm_path) if src.needs else None
    trainer = PPOTrainer(
        cfg, paths["policy"], prompts, out, reward_source=source, align_cfg=pipe.align, task_metric=metric, hook=loop
    )
    t0 = time.perf_counter()
    keep = {*args.drift_steps, args.steps}
    warm, history, kept = train_evaluated(trainer, eval_df, metric, eval_steps(args), keep_at=keep)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    record = {"arm": arm, "seed": seed, "seconds": time.perf_counter() - t0, "warm_eval": warm, "history": history}
    at = {str(s): rm_path for s in args.drift_steps} if src.matched else {}  # the drift curve scores with PPO's tagger
    if loop is not None:
        at |= reward_model_at(loop.state.refreshed, args.drift_steps)
        record["loop_start"] = loop.start_model
    return record | {"reward_model_at": at, "responses": kept}


def run_specs(args) -> None:
    paths, srcs = json.loads(args.paths), sources(args)
    run_spec_file(args.specs, lambda spec, out: run_arm(args, paths, srcs, spec["arm"], spec["seed"], out))


def drift(args, runs: list[dict], arms: list[str], paths: dict) -> dict:
    """Per arm and drift step, the static tagger's poor spans against the oracle's on that arm's held-out responses
    (all seeds pooled)."""
    from t2g_core.ppo.rollout import row_dict
    from t2g_core.ppo.sources import oracle_source, reward_model_source

    pipe = _pipeline(args)
    rows = {r["id"]: row_dict(r) for _, r in make_demo_feedback("summarization", args.n_eval, seed=2).iterrows()}
    oracle, scorers = oracle_source("summarization"), {}
    rm_cfg = pipe.reward_model.model_copy(update=TAGGER)
    out: dict[str, dict] = {}
    for arm in arms:
        for step in args.drift_steps:
            batch, scored = [], []
            for run in (r for r in runs if r["arm"] == arm):
                path = run.get("reward_model_at", {}).get(str(step), paths["tagger"])
                scorer = scorers.setdefault(path, reward_model_source(path, rm_cfg))
                mine = [{**rows[i], "response": text} for i, text in run["responses"][str(step)]]
                batch += mine
                scored += scorer.critique_batch(mine)
            texts = [row["response"] for row in batch]
            agreement = poor_span_agreement(texts, scored, oracle.critique_batch(batch), pipe.align)
            out.setdefault(arm, {})[str(step)] = agreement
    return out


def parse_args() -> argparse.Namespace:
    p = parser(__doc__, publish=True)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--arms", default="oracle,tagger,noisy", help=f"Reward sources, from: {', '.join(SOURCES)}.")
    p.add_argument("--estimators", default="gae,span_local", help=f"From: {', '.join(ESTIMATORS)}.")
    p.add_argument("--n-eval", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=2, help="Held-out evaluation every N steps after the dense part.")
    p.add_argument("--dense-evals", type=int, default=8, help="Held-out evaluation after each of the first N steps.")
    p.add_argument("--plateau-evals", type=int, default=3, help="A run's plateau: the mean of its last N evaluations.")
    p.add_argument("--drift-steps", default="0,20,40", help="Steps trained at which the drift curve is measured.")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--runs-per-process", type=int, default=1, help="Runs one worker process does one after another.")
    p.add_argument("--threads", type=int, default=2, help="Threads while building models and reward models.")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="PipelineConfig override.")
    p.add_argument("--refresh-set", action="append", default=[], help="Override of the refreshed arms alone.")
    p.add_argument(
        "--matched-labels", type=int, default=None, help="Warm-start labels of the matched arm (default: the loop's)."
    )
    p.add_argument("--name", default="bench_rm_ppo", help="Stem of the results and figure names.")
    p.add_argument("--workdir", default=str(results_dir() / "bench_rm_ppo_work"))
    p.add_argument("--policy", default=None, help="A warm-started policy folder (e.g. the demo's) instead of building.")
    p.add_argument("--base", default=None, help="Its base folder (a generative reward model starts there).")
    p.add_argument("--reward-models", default="", help="KIND=FOLDER,...: trained reward models, e.g. tagger-heads5=DIR")
    p.add_argument("--run-specs", dest="specs", default=None, help=argparse.SUPPRESS)
    p.add_argument("--paths", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.smoke and not args.specs:
        args.seeds, args.steps, args.n_eval, args.drift_steps = 1, 2, 4, "0,2"
        args.workdir, args.runs_per_process = str(results_dir(smoke=True) / "bench_rm_ppo_work"), 100
        args.threads = 1  # the suite runs it beside another test: a second thread only contends for a core
        args.overrides = ["ppo.batch_size=4", "ppo.minibatches=1", "ppo.sampling.max_new_tokens=8", *args.overrides]
        shutil.rmtree(Path(args.workdir) / "runs", ignore_errors=True)
    args.drift_steps = [int(x) for x in str(args.drift_steps).split(",") if x != ""]
    if any(not 0 <= s <= args.steps for s in args.drift_steps):
        p.error(f"--drift-steps {args.drift_steps}: each must be in 0..--steps ({args.steps})")
    return args


def main() -> None:
    args = parse_args()
    if args.specs:
        return run_specs(args)

    srcs = sources(args)  # an arm that cannot run stops here, before any work
    if any(s.matched for s in srcs.values()) and args.matched_labels is None:
        args.matched_labels = matched_labels(args)
    arms = [f"{s}-{e}" for s in srcs for e in args.estimators.split(",")]
    unknown = [e for e in args.estimators.split(",") if e not in ESTIMATORS]
    if unknown:
        raise SystemExit(f"--estimators: unknown {', '.join(unknown)}; expected some of {', '.join(ESTIMATORS)}")
    t0 = time.perf_counter()
    paths = prepare(args, srcs)
    flags = [*(["--smoke"] if args.smoke else []), "--steps", str(args.steps), "--n-eval", str(args.n_eval)]
    flags += ["--eval-every", str(args.eval_every), "--dense-evals", str(args.dense_evals)]
    flags += ["--drift-steps", ",".join(map(str, args.drift_steps)), "--paths", json.dumps(paths)]
    flags += [x for o in args.overrides for x in ("--set", o)]
    flags += [x for o in args.refresh_set for x in ("--refresh-set", o)]
    key = key_of(flags)  # not of --arms: a run's folder names its arm, so a run added to the arms reuses the others
    specs = [
        {"arm": a, "seed": s, "out": str(Path(args.workdir) / "runs" / key / f"{a}-seed{s}")}
        for s in range(args.seeds)
        for a in arms
    ]
    flags += ["--arms", args.arms]
    runs = run_in_processes(
        [sys.executable, __file__, *flags], specs, args.workdir, args.workers, args.runs_per_process
    )
    table = summarise(args, runs, arms, _pipeline(args).ppo.batch_size)
    shares, drifts = oracle_shares(args, runs, arms), drift(args, runs, arms, paths)
    controls = contrasts(args, runs, arms)
    eval_df = make_demo_feedback("summarization", args.n_eval, seed=2)
    diagnosis = curves.diagnose(lambda kept: fact_profile(eval_df, kept), runs, arms, args.steps)
    figure = results_dir(args.smoke) / f"{args.name}.png"
    title = "PPO on each reward source (the oracle: the ideal-critic upper bound), mean and 95% band"
    curves.plot_curves(runs, arms, figure, title, "held-out error (1 - correct facts / 8)", FRACTIONS)
    config = {k: v for k, v in vars(args).items() if k not in ("paths", "specs")}
    result = {"benchmark": "bench_rm_ppo", "config": config, "reward_models": paths, "eval_steps": eval_steps(args)}
    result |= {"arms": table, "oracle_shares": shares, "controls": controls, "drift": drifts, "diagnosis": diagnosis}
    summary = {k: result[k] for k in ("benchmark", "eval_steps", "oracle_shares", "controls", "drift")} | {
        "settings": {k: config[k] for k in SUMMARY_SETTINGS},
        "arms": {a: curves.arm_row(t, FRACTIONS) | {k: t[k] for k in ARM_EXTRA} for a, t in table.items()},
        "diagnosis": {arm: curves.short_diagnosis(d) for arm, d in diagnosis.items()},
        "mean_curves": curves.mean_curves(runs, arms),
    }
    result |= {
        "wall_seconds": time.perf_counter() - t0,
        "curves": {f"{r['arm']}|seed{r['seed']}": curves.curve(r) for r in runs},
    }
    path = write_results(args.name, result, summary, smoke=args.smoke, publish=args.publish)
    print_report(table, shares, drifts, controls)
    curves.print_diagnosis(diagnosis)
    print(f"-> {path}\nfigure: {figure}")
    return None


if __name__ == "__main__":
    main()
