"""Reward-model kinds on the demo (tiny models, CPU): do they localise the policy's errors, and at what cost?

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import json
import platform
import resource
import time
from pathlib import Path

from testbed import RM_SMOKE_ITEMS, RM_SMOKE_OVERRIDES, RM_SMOKE_WORK, parser, results_dir, save_json, stay_offline

from t2g_core.config import AnnotateConfig, EvaluateConfig, load_config

stay_offline()
RESULTS = results_dir()

VARIANTS = {  # name -> reward_model settings
    "tagger": {"kind": "tagger", "init_from": "policy"},
    "tagger-frozen": {"kind": "tagger", "init_from": "policy", "finetune": "frozen"},
    "tagger-heads5": {"kind": "tagger", "init_from": "policy", "tagger_heads": 5},
    "tagger-frozen-heads5": {"kind": "tagger", "init_from": "policy", "finetune": "frozen", "tagger_heads": 5},
    "generative": {"kind": "generative", "init_from": "reward_model_base"},
    "generative-policy": {"kind": "generative", "init_from": "policy"},
}
TRUTH_KEYS = tuple(
    "truth_poor_char_f1 truth_poor_char_precision truth_poor_char_recall truth_recall_invented truth_recall_swapped "
    "truth_recall_redundant truth_span_f1".split()
)
KEYS = (*TRUTH_KEYS, "span_f1", "omission_precision", "omission_recall", "unmatched_span_rate", "json_valid_rate")
KEYS += ("parse_ok_rate", "score_ms_per_item", "token_ece")


def _annotated(fb):
    from t2g_core.annotators import annotate

    return annotate(fb, AnnotateConfig(annotator="reference"), progress=False).frame


def _rows(fb, ann, cfg, align_cfg, tokenizer_dir, split: str | None = None):
    from transformers import AutoTokenizer

    from t2g_core.reward_model.data import build_rm_data

    df, _ = build_rm_data(fb, ann, AutoTokenizer.from_pretrained(str(tokenizer_dir)), cfg, align_cfg=align_cfg)
    return df.assign(split=split) if split else df


def _train(name: str, cfg, start: Path, rm_df, fb, work: Path, align_cfg):
    from t2g_core.reward_model.tagger_train import fit_tagger, tagger_examples
    from t2g_core.reward_model.train import train_rm

    out = work / f"rm-{name}"
    if cfg.kind == "tagger":
        return fit_tagger(cfg, start, tagger_examples(rm_df, fb), out, overlap=align_cfg.overlap, resume=False)
    return train_rm(cfg, start, rm_df, out, resume=False, progress=False)


def peak_rss_gb() -> float:
    """This process's peak resident memory so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 1e6


def _baselines(items):
    """Trivial predictions on the ground truth's value spans: all of them poor, or all of them good."""
    from t2g_core.spans import ParsedFeedback

    def values(it, label):  # the value spans of the truth (repeated clauses are not values)
        return tuple((s, e, label) for s, e, _lab, *kind in it.truth or () if kind != ["redundant"])

    poor = [ParsedFeedback("", located=values(it, "negative")) for it in items]
    good = [ParsedFeedback("", located=values(it, "positive")) for it in items]
    return {"all_values_poor": poor, "all_values_good": good}


def _policy_samples(policy: Path, fb, n: int):
    """(rows, EvalItems with typed truth) for one sampled summary per prompt of ``fb`` from the policy."""
    from t2g_core.evaluation.generate import generate
    from t2g_core.reward_model.evaluate import EvalItem, _truth_from_meta
    from t2g_core.spans import ParsedFeedback

    rows = fb.head(n).to_dict("records")
    cfg = EvaluateConfig(sampling={"max_new_tokens": 48}, batch_size=32)
    texts = generate(policy, "summarization", [r["prompt"] for r in rows], cfg)
    items = [
        EvalItem(r["id"], "", t, ParsedFeedback(""), _truth_from_meta(r["meta"], t))
        for r, t in zip(rows, texts, strict=True)
    ]
    return [{**r, "response": t} for r, t in zip(rows, texts, strict=True)], items


def evaluate_variant(name, cfg, result, rm_eval, fb_eval, align_cfg, samples) -> dict:
    from t2g_core.reward_model.evaluate import calibration_error, evaluate_model, score_predictions
    from t2g_core.reward_model.scoring import load_scorer
    from t2g_core.reward_model.tagger import prediction_feedback, token_classes
    from t2g_core.spans.locate import exact_spans

    report = evaluate_model(result.adapter_dir, rm_eval, fb_eval, cfg, split="validation", align_cfg=align_cfg)
    out = {"train_seconds": round(result.train_seconds, 1), "steps": result.global_step}
    out |= {"model_folder_mb": round(folder_mb(result.adapter_dir), 2), "n_eval": int(report.metrics.get("n_items", 0))}
    out |= {k: report.metrics[k] for k in KEYS if k in report.metrics}
    if samples is not None and cfg.kind == "tagger":
        rows, items = samples
        scorer = load_scorer(result.adapter_dir, cfg)
        encoded, preds = scorer.predict_batch(rows)
        feedback = [prediction_feedback(r["response"], e, p) for r, e, p in zip(rows, encoded, preds, strict=True)]
        metrics, _ = score_predictions(items, feedback, scorer.tokenizer, align_cfg=align_cfg)
        out["on_policy_samples"] = {k: metrics[k] for k in TRUTH_KEYS if k in metrics}
        truth = [  # the demo's truth per response token: how well the label probabilities are calibrated on it
            token_classes(e.offsets, exact_spans(it.response, it.truth or ()), "poor_wins")
            for it, e in zip(items, encoded, strict=True)
        ]
        out["on_policy_samples"]["truth_token_ece"] = calibration_error([p.probs for p in preds], truth)
    print(f"{name:18s} " + " ".join(f"{k}={v:.3f}" for k, v in out.items() if isinstance(v, float)), flush=True)
    return out


def parse_args():
    ap = parser(__doc__)
    ap.add_argument("--items", type=int, default=1024, help="Annotated demo items to train on (seed 0).")
    ap.add_argument("--eval-items", type=int, default=200, help="Held-out demo items (seed 99).")
    ap.add_argument("--policy-samples", type=int, default=200, help="Policy samples the tagger also scores.")
    ap.add_argument("--variants", default="tagger,generative,generative-policy")
    ap.add_argument("--base", default=None, help="A real model (folder or Hub id) as policy and reward-model base.")
    ap.add_argument("--name", default="bench_rm", help="Results file stem under the results folder.")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="PipelineConfig override.")
    ap.add_argument("--work", type=Path, default=RESULTS / "bench_rm_work")
    args = ap.parse_args()
    if args.smoke:  # each kind once, a handful of items, one thread (the suite runs it beside another test)
        args.items, args.eval_items, args.policy_samples, args.variants = RM_SMOKE_ITEMS, 4, 2, "tagger,generative"
        args.threads = 1
        args.work, args.overrides = RM_SMOKE_WORK, [*RM_SMOKE_OVERRIDES, *args.overrides]
    if args.base:
        args.overrides = [f"models.policy={args.base}", f"models.reward_model_base={args.base}", *args.overrides]
    return args


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from t2g_core.demo import make_demo_feedback
    from t2g_core.models.demo_build import ensure_demo_models
    from t2g_core.reward_model.evaluate import eval_items, score_predictions

    pipe = load_config(None, args.overrides)
    fb, fb_eval = (
        make_demo_feedback("summarization", n, seed=seed) for n, seed in ((args.items, 0), (args.eval_items, 99))
    )
    t0 = time.perf_counter()
    models = ensure_demo_models(args.work / "models", pipe.models, fb, progress=False)
    print(f"models: {models.policy} ({time.perf_counter() - t0:.0f} s)", flush=True)
    ann, ann_eval = _annotated(fb), _annotated(fb_eval)
    samples = _policy_samples(models.policy, fb_eval, args.policy_samples) if args.policy_samples else None
    out: dict = {"variants": {}}
    for name in args.variants.split(","):
        cfg = pipe.reward_model.model_copy(update=VARIANTS[name.removesuffix("-ungrounded")])
        start = models.policy if cfg.init_from == "policy" else models.base
        rm_df = _rows(fb, ann, cfg.model_copy(update={"val_fraction": 0.0}), pipe.align, start)
        rm_eval = _rows(fb_eval, ann_eval, cfg, pipe.align, start, split="validation")
        cpu0 = time.process_time()
        result = _train(name, cfg, start, rm_df, fb, args.work, pipe.align)
        cpu = time.process_time() - cpu0
        out["variants"][name] = evaluate_variant(name, cfg, result, rm_eval, fb_eval, pipe.align, samples)
        out["variants"][name] |= {"train_cpu_seconds": round(cpu, 1), "peak_rss_gb": round(peak_rss_gb(), 2)}
        if cfg.kind == "generative":
            free = cfg.model_copy(update={"grounded_decoding": False})
            ungrounded = evaluate_variant(f"{name}-ungrounded", free, result, rm_eval, fb_eval, pipe.align, None)
            out["variants"][f"{name}-ungrounded"] = ungrounded
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(models.policy))
    rows = _rows(fb_eval, ann_eval, pipe.reward_model, pipe.align, models.policy, "validation")
    items = eval_items(rows, fb_eval, None)
    out["baselines"] = {
        name: {k: v for k, v in score_predictions(items, preds, tok, align_cfg=pipe.align)[0].items() if k in KEYS}
        for name, preds in _baselines(items).items()
    }
    out |= {
        "benchmark": "bench_rm",
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": args.threads},
        "base": args.base or "tiny demo models",
        "data": {"train_items": args.items, "eval_items": args.eval_items, "eval_seed": 99, "train_seed": 0},
        "config": pipe.reward_model.model_dump(mode="json"),
    }
    print(json.dumps(out["baselines"], indent=1))
    save_json(results_dir(args.smoke) / f"{args.name}.json", out, indent=2)


if __name__ == "__main__":
    main()
