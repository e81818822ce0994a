"""Rollout throughput of each generation backend available here: response tokens per second.

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from testbed import parser, random_llama, results_dir, save_json

from t2g_core.config.ppo import PPOConfig
from t2g_core.policy_prompts import render_policy_prompt


def measure(backend, model, enc, args, reps: int) -> list[float]:
    """Tokens per second of each repetition (response tokens up to and including EOS)."""
    import torch

    from t2g_core.ppo.sampling import response_mask_after_eos

    rates = []
    for r in range(reps):
        t0 = time.perf_counter()
        ids = backend.generate(model, enc["input_ids"], enc["attention_mask"], list(range(args.batch)), stream=r)
        seconds = time.perf_counter() - t0
        mask, _ = response_mask_after_eos(ids, backend.tok.eos_token_id)
        rates.append(float(mask.sum()) / seconds)
        del ids
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return rates


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32768, help="The model's vocabulary (sampling cost grows with it).")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=5, help="Timed repetitions per backend (after one warm-up).")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    out_dir = results_dir(args.smoke)
    if args.smoke:
        args.hidden, args.layers, args.vocab, args.batch, args.max_new_tokens, args.reps = 64, 1, 512, 4, 8, 1

    import torch

    from t2g_core.models.loading import load_causal_lm, load_tokenizer, resolve_dtype
    from t2g_core.ppo.generation import BACKENDS

    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({args.threads} thread)"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shape = {"hidden_size": args.hidden, "intermediate_size": args.hidden * 3, "num_hidden_layers": args.layers}
        random_llama(folder, 4096, vocab=args.vocab, num_attention_heads=max(args.hidden // 64, 2), **shape)
        tok = load_tokenizer(folder)
        dtype = resolve_dtype("auto", device)
        model = load_causal_lm(folder, dtype=dtype, device=device, tokenizer=tok).eval()
        posts = [f"Post {i}: Cai lives in Quito with {i % 5 + 1} gray dogs and works as a coach." for i in range(99)]
        texts = [render_policy_prompt(tok, "summarization", posts[i]) for i in range(args.batch)]
        enc = tok(texts, add_special_tokens=False, padding=True, return_tensors="pt").to(device)
        cfg = PPOConfig(sampling={"max_new_tokens": args.max_new_tokens}, generation_backend="hf")
        for name, cls in BACKENDS.items():
            try:
                backend = cls(cfg, tok, model_ref=str(folder), dtype=dtype, workdir=Path(tmp), rank=0)
            except (ImportError, ValueError) as exc:  # vLLM absent, or refusing this dtype
                results[name] = {"status": "not run", "reason": str(exc)}
                print(f"{name:6s} not run: {exc}")
                continue
            rates = measure(backend, model, enc, args, args.reps + 1)[1:]
            results[name] = {"status": "ok", "tokens_per_s": max(rates), "mean_tokens_per_s": statistics.fmean(rates)}
            results[name]["reps"] = rates
    base = results["exact"]["tokens_per_s"]
    for name in BACKENDS:
        if results[name]["status"] == "ok":
            r = results[name]
            r["vs_exact"] = r["tokens_per_s"] / base
            print(
                f"{name:6s} {r['tokens_per_s']:9.1f} tokens/s (best of {len(r['reps'])}; mean "
                f"{r['mean_tokens_per_s']:.1f})   {r['vs_exact']:.2f}x exact"
            )
    results["config"] = vars(args)
    save_json(out_dir / "generation.json", results, note=f" ({results['device']})")


if __name__ == "__main__":
    main()
