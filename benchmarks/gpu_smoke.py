"""GPU smoke check: PPO on a random-initialised ~1B-parameter Llama built locally (a GPU box may have no Hub access).

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from testbed import parser, peak_flops, random_llama, results_dir, save_json

from t2g_core.config.ppo import PPOConfig
from t2g_core.policy_prompts import render_policy_prompt


class EdgeWordsCritic:
    """First word poor, last word good: cheap, deterministic, exercises span rewards."""

    def critique(self, row):
        from t2g_core.spans import ParsedFeedback

        words = row["response"].split()
        if len(words) < 2:
            return ParsedFeedback(critique="too short", poor_spans=words)
        return ParsedFeedback(critique="edges", good_spans=[words[-1]], poor_spans=[words[0]])


LLAMA_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32)
LLAMA_1B |= dict(num_key_value_heads=8)  # Llama-3.2-1B's shape
SMOKE_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
SMOKE_SHAPE |= dict(num_key_value_heads=2)


def ppo_config(args) -> PPOConfig:
    fields = dict(steps=args.steps, batch_size=args.batch_size, minibatches=2, ppo_epochs=args.ppo_epochs)
    fields |= dict(sampling={"temperature": 1.0, "max_new_tokens": args.max_new_tokens}, value_model="head")
    fields |= dict(lora={"r": 16, "alpha": 32}, learning_rate=1e-5, generation_backend=args.backend)
    fields |= dict(micro_batch_size=args.micro_batch_size, gradient_checkpointing=args.gradient_checkpointing)
    return PPOConfig(**fields, save_every=10**6, log_every=10**6, heatmap_samples=0)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--ppo-epochs", type=int, default=2)
    p.add_argument("--backend", choices=("hf", "exact", "vllm"), default="hf")
    p.add_argument("--micro-batch-size", type=int, default=16)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--peak-tflops", type=float, default=None, help="The GPU's peak dense bf16 TFLOP/s (for MFU).")
    args = p.parse_args()

    import torch

    if not torch.cuda.is_available() and not args.smoke:
        raise SystemExit("no CUDA device here: gpu_smoke.py measures a GPU (run --smoke for the CPU check)")
    if args.smoke:
        args.steps, args.batch_size, args.max_new_tokens, args.ppo_epochs, args.micro_batch_size = 2, 4, 8, 1, 2
        torch.set_num_threads(1)
    from t2g_core.demo import make_demo_feedback
    from t2g_core.models.loading import default_device, load_tokenizer, resolve_dtype
    from t2g_core.ppo import CriticSource, train

    out_dir = results_dir(args.smoke)
    prompts = make_demo_feedback("summarization", max(args.batch_size * 2, 8), seed=3)
    with tempfile.TemporaryDirectory() as tmp:
        folder, device = Path(tmp) / "model", "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        shape = SMOKE_SHAPE if args.smoke else LLAMA_1B
        model = random_llama(folder, 8192, device=device, dtype=dtype, max_position_embeddings=4096, **shape)
        n_params = sum(p.numel() for p in model.parameters())
        del model
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        critic = CriticSource(EdgeWordsCritic())
        dtype = resolve_dtype("auto", default_device())
        res = train(ppo_config(args), folder, prompts, Path(tmp) / "run", reward_source=critic, dtype=dtype)
        loaded = json.loads((Path(tmp) / "run" / "models.json").read_text())
        tok = load_tokenizer(folder)
        rendered = [render_policy_prompt(tok, "summarization", p) for p in prompts["prompt"].head(args.batch_size)]
        prompt_tokens = statistics.fmean(len(tok(t, add_special_tokens=False)["input_ids"]) for t in rendered)
    hist = res.history[1:] or res.history  # step 0 carries one-off warm-up costs
    step_s = statistics.fmean(h["time/step"] for h in hist)
    rollout_s = statistics.fmean(h["time/rollout"] for h in hist)
    response_tokens = statistics.fmean(h["response/length"] for h in hist) * args.batch_size
    tokens = response_tokens + prompt_tokens * args.batch_size  # per step, all sequences
    flops = (2 * n_params * tokens) * 3 + 4 * n_params * tokens * args.ppo_epochs
    peak = args.peak_tflops or (table / 1e12 if (table := peak_flops()) else None)
    report = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (smoke: not GPU figures)",
        "parameters": n_params,
        "dtype": loaded["policy"]["dtype"],
        "generation_backend": args.backend,
        "ppo_steps_per_s": 1.0 / step_s,
        "step_s": step_s,
        "rollout_tokens_per_s": response_tokens / rollout_s,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / (1 << 30) if torch.cuda.is_available() else None,
        "model_tflops_per_step": flops / 1e12,
        "mfu": (flops / step_s) / (peak * 1e12) if peak else None,
        "peak_bf16_tflops": peak,
        "prompt_tokens": prompt_tokens,
        "config": vars(args),
    }
    for key in ("device", "parameters", "dtype", "ppo_steps_per_s", "rollout_tokens_per_s", "peak_memory_gib", "mfu"):
        print(f"{key:22s} {report[key]}")
    save_json(out_dir / "gpu_smoke.json", report)


if __name__ == "__main__":
    main()
