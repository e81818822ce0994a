"""Reward-model benchmark on the demo data (tiny model, CPU).

Measures: training time; on the held-out split the strict JSON-valid rate (target >= 95%), the parse rate, span and
token F1 against the gold annotation spans and against the demo ground truth, unmatched-span rate and ROUGE-L; the
same metrics for trivial baselines ("no spans", "every value poor", "every value good"); generation tokens/s at
batch 1 and batch 16. Writes ``benchmarks/results/bench_rm.json``.

    .venv/bin/python benchmarks/bench_rm.py [--items 256] [--threads 2] [--set reward_model.epochs=4 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

for _k, _v in {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "DO_NOT_TRACK": "1",
}.items():
    os.environ.setdefault(_k, _v)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"


def _baselines(items, fb):
    """Trivial predictions: no spans; every demo value span marked poor; every value span marked good."""
    from t2g_core.spans import ParsedFeedback

    meta = {r.id: json.loads(r.meta) for r in fb.itertuples() if isinstance(r.meta, str)}

    def values(it):
        return [it.response[s["start"] : s["end"]] for s in meta.get(it.id, {}).get("gold_spans", [])]

    return {
        "no_spans": [ParsedFeedback("", [], []) for _ in items],
        "all_values_poor": [ParsedFeedback("", [], values(it)) for it in items],
        "all_values_good": [ParsedFeedback("", values(it), []) for it in items],
    }


def _speed(model, tok, prompts, cfg, batch):
    from t2g_core.reward_model.scoring import generate_texts

    c = cfg.model_copy(update={"score_batch_size": batch})
    generate_texts(model, tok, prompts[:batch], c)  # warm-up
    g = generate_texts(model, tok, prompts, c)
    return {
        "batch": batch,
        "n_prompts": len(prompts),
        "new_tokens": sum(g.n_new_tokens),
        "seconds": round(g.seconds, 3),
        "tokens_per_s": round(g.tokens_per_second, 1),
    }


# a base that only has to exist, a few training steps
SMOKE_OVERRIDES = [
    "models.tiny.vocab_size=256",
    "models.tiny.hidden_size=32",
    "models.tiny.intermediate_size=64",
    "models.tiny.warm_start_steps=2",
    "models.tiny.policy_sft_steps=2",
    "models.tiny.policy_noise_steps=1",
    "models.tiny.policy_sft_examples=32",
    "reward_model.max_steps=2",
    "reward_model.max_new_tokens=16",
    "reward_model.max_target_tokens=4096",
]

KEYS = (
    "json_valid_rate",
    "parse_ok_rate",
    "span_f1",
    "span_positive_f1",
    "span_negative_f1",
    "token_f1",
    "truth_span_f1",
    "unmatched_span_rate",
    "rouge_l",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="PipelineConfig override, e.g. reward_model.epochs=4",
    )
    ap.add_argument("--work", type=Path, default=RESULTS / "bench_rm_work")
    ap.add_argument("--name", default="bench_rm", help="Results file name (and run folder) for side-by-side variants.")
    ap.add_argument("--smoke", action="store_true", help="A tiny run that only proves the script works (the suite).")
    args = ap.parse_args()
    results = RESULTS / "smoke" if args.smoke else RESULTS
    if args.smoke:
        args.items, args.work = 24, results / "bench_rm_work"
        args.overrides = [*SMOKE_OVERRIDES, *args.overrides]

    import torch

    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    from t2g_core.annotators import annotate
    from t2g_core.config import load_config
    from t2g_core.demo import make_demo_feedback
    from t2g_core.models.tiny import ensure_demo_models
    from t2g_core.reward_model.data import build_rm_data
    from t2g_core.reward_model.evaluate import eval_items, evaluate_rm, score_predictions
    from t2g_core.reward_model.scoring import load_reward_model
    from t2g_core.reward_model.train import train_rm

    pipe = load_config(None, ["annotate.annotator=reference", *args.overrides])
    cfg = pipe.reward_model
    fb = make_demo_feedback("summarization", args.items, seed=0)
    t0 = time.perf_counter()
    models = ensure_demo_models(args.work / "models", pipe.models, fb, progress=False)
    build_s = time.perf_counter() - t0
    ann = annotate(fb, pipe.annotate, progress=False).frame
    tok = AutoTokenizer.from_pretrained(models.base)
    rm_df, stats = build_rm_data(fb, ann, tok, cfg, align_cfg=pipe.align)
    print(
        f"rm_data: {stats.n_train} train / {stats.n_validation} validation; prompt tokens "
        f"{max(len(tok(p)['input_ids']) for p in rm_df.rm_prompt)} max, target tokens "
        f"{max(len(tok(t)['input_ids']) for t in rm_df.rm_target)} max"
    )

    result = train_rm(cfg, models.base, rm_df, args.work / f"rm_run-{args.name}", resume=False, progress=False)
    print(f"trained {result.global_step} steps in {result.train_seconds:.1f} s")
    model, rm_tok = load_reward_model(result.adapter_dir, device="cpu")
    items = eval_items(rm_df, fb, rm_tok.eos_token)
    report = evaluate_rm(model, rm_tok, items, cfg, align_cfg=pipe.align)
    baselines = {
        name: score_predictions(items, preds, rm_tok, align_cfg=pipe.align)[0]
        for name, preds in _baselines(items, fb).items()
    }
    prompts = [it.rm_prompt for it in items][:16]
    speed = [_speed(model, rm_tok, prompts, cfg, b) for b in (1, 16)]

    losses = [h["rm/loss"] for h in result.history if "rm/loss" in h]
    out = {
        "benchmark": "bench_rm",
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": args.threads,
            "cpus": os.cpu_count(),
        },
        "data": {"items": args.items, **{k: v for k, v in stats.as_metrics().items()}},
        "config": cfg.model_dump(mode="json"),
        "base_model": {
            "path": str(models.base),
            "build_seconds_if_built": round(build_s, 1),
            "parameters": sum(p.numel() for p in model.parameters()),
        },
        "train": {
            "steps": result.global_step,
            "seconds": round(result.train_seconds, 1),
            "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None,
        },
        "heldout": {
            k: report.metrics.get(k)
            for k in (*KEYS, "eos_rate", "n_items", "gen_tokens_per_s", "span_precision", "span_recall")
        },
        "baselines": {name: {k: m.get(k) for k in KEYS if k in m} for name, m in baselines.items()},
        "generation_speed": speed,
        "json_valid_target_met": report.metrics["json_valid_rate"] >= 0.95,
        "examples": report.examples[:3],
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{args.name}.json").write_text(json.dumps(out, indent=2), encoding="utf-8")
    print(json.dumps({k: out[k] for k in ("train", "heldout", "baselines", "generation_speed")}, indent=2))


if __name__ == "__main__":
    main()
