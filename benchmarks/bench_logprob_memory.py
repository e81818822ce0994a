"""Peak memory of one token-log-prob pass: the naive full log-softmax against the chunked selective pass PPO uses.

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from testbed import parser, results_dir, save_json

from t2g_core.config.ppo import PPOConfig


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def run_variant(args: argparse.Namespace) -> None:
    """One variant in this (child) process: build the inputs, measure the pass, save its output."""
    import time

    import torch

    from t2g_core.rl.logprobs import selective_logprobs, token_logprobs

    torch.set_num_threads(1)
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda" if cuda else "cpu"), getattr(torch, args.dtype)
    g = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        head = torch.nn.Linear(args.hidden, args.vocab, bias=False, device=device, dtype=dtype)
        head.weight.normal_(0.0, 0.02, generator=g)
        hidden = torch.randn(args.batch, args.tokens, args.hidden, generator=g, device=device, dtype=dtype)
        ids = torch.randint(0, args.vocab, (args.batch, args.tokens), generator=g, device=device)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        else:
            before = _status_kib("VmRSS") * 1024
        t0 = time.perf_counter()
        if args.variant == "naive":
            out = token_logprobs(head(hidden), ids, args.temperature)
        else:
            out = selective_logprobs(hidden, head, ids, args.temperature, chunk_tokens=args.chunk_tokens)
        if cuda:
            torch.cuda.synchronize()
            peak, method = torch.cuda.max_memory_allocated(), "torch.cuda.max_memory_allocated"
        else:
            peak, method = _status_kib("VmHWM") * 1024, "VmHWM (resident-set high-water mark, /proc/self/status)"
        seconds = time.perf_counter() - t0
    torch.save(out.cpu(), args.output)
    report = {"variant": args.variant, "device": device, "method": method, "bytes_before": before, "peak_bytes": peak}
    print(json.dumps(report | {"pass_peak_bytes": peak - before, "seconds": seconds}))


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--vocab", type=int, default=128_256, help="Vocabulary size (Llama 3: 128256).")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=512, help="Response tokens per row.")
    p.add_argument("--hidden", type=int, default=1024, help="Hidden size (the logits do not depend on it; 4096 on 8B).")
    p.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16 (CUDA default).")
    p.add_argument("--chunk-tokens", type=int, default=None, help="Default: ppo.logprob_chunk_tokens.")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--variant", choices=("naive", "chunked"), help=argparse.SUPPRESS)
    p.add_argument("--output", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.variant:
        run_variant(args)
        return

    import torch

    args.chunk_tokens = args.chunk_tokens or PPOConfig().logprob_chunk_tokens
    args.dtype = args.dtype or ("bfloat16" if torch.cuda.is_available() else "float32")
    out_dir = results_dir(args.smoke)
    if args.smoke:
        args.vocab, args.batch, args.tokens, args.hidden, args.chunk_tokens = 4096, 2, 64, 32, 32
    shared = [
        *("--vocab", str(args.vocab), "--batch", str(args.batch), "--tokens", str(args.tokens)),
        *("--hidden", str(args.hidden), "--dtype", args.dtype, "--chunk-tokens", str(args.chunk_tokens)),
        *("--temperature", str(args.temperature)),
    ]
    results, outputs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in ("naive", "chunked"):
            path = Path(tmp) / f"{variant}.pt"
            cmd = [sys.executable, __file__, *shared, "--variant", variant, "--output", str(path)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"{variant} failed:\n{proc.stderr[-3000:]}")
            results[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
            outputs[variant] = torch.load(path)
    diff = float((outputs["naive"] - outputs["chunked"]).abs().max())
    naive, chunked = results["naive"], results["chunked"]
    summary = {
        "pass_peak_ratio": chunked["pass_peak_bytes"] / naive["pass_peak_bytes"],
        "process_peak_ratio": chunked["peak_bytes"] / naive["peak_bytes"],
        "max_abs_diff": diff,
        "equal_within_tolerance": diff < (1e-4 if args.dtype == "float32" else 2e-2),
        "logits_bytes_float32": args.batch * args.tokens * args.vocab * 4,
    }
    gib = 1 << 30
    for name, r in results.items():
        print(
            f"{name:8s} pass peak {r['pass_peak_bytes'] / gib:6.2f} GiB   process peak {r['peak_bytes'] / gib:6.2f} GiB"
            f"   {r['seconds']:.1f} s   ({r['method']})"
        )
    print(
        f"chunked / naive: pass peak {summary['pass_peak_ratio']:.3f}x, process peak "
        f"{summary['process_peak_ratio']:.3f}x; max |difference| {diff:.2e} "
        f"({'equal' if summary['equal_within_tolerance'] else 'NOT equal'} within tolerance)"
    )
    config = {k: v for k, v in vars(args).items() if k not in ("variant", "output")}
    save_json(out_dir / "logprob_memory.json", {"config": config, **results, **summary})
    if not summary["equal_within_tolerance"]:
        raise SystemExit("the chunked log-probs differ from the full log-softmax")


if __name__ == "__main__":
    main()
