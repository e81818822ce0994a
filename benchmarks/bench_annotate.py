"""Annotation benchmarks: LLM annotator throughput vs the concurrency limit; code-critic fault localisation.

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
from testbed import parser, results_dir

from t2g_core.annotators import annotate
from t2g_core.config.annotate import AnnotateConfig
from t2g_core.critics import isolation
from t2g_core.critics.code import CodeCritic
from t2g_core.critics.reference import ReferenceCritic
from t2g_core.critics.sandbox import SandboxLimits, run_cases
from t2g_core.demo import make_demo_feedback
from t2g_core.demo.code import load_problems, mutants


def _items(n: int) -> pd.DataFrame:
    rows = pd.DataFrame({"id": [f"b{i:04d}" for i in range(n)], "task": "qa"})
    rows["prompt"] = [f"Question {i}?" for i in range(n)]
    rows["response"] = [f"Answer number {i} is forty two." for i in range(n)]
    return rows.assign(critique=None, reference=None, tests=None, entry_point=None, meta=None)


async def _raw_ceiling(base_url: str, c: int, n: int, latency: float) -> float:
    """The same requests with a bare httpx client (no SDK, no annotator): what this machine allows right now."""
    import httpx2

    body = {"model": "bench", "messages": [{"role": "user", "content": "<response>\nforty two\n</response>"}]}
    async with httpx2.AsyncClient(limits=httpx2.Limits(max_connections=c)) as client:
        sem = asyncio.Semaphore(c)

        async def one() -> None:
            async with sem:
                (await client.post(f"{base_url}/chat/completions", json=body, timeout=30)).json()

        await asyncio.gather(*(one() for _ in range(c)))
        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - start) / (c / latency)


def throughput(latency: float, levels: list[int], waves: int, rounds: int, cache_parent: Path) -> list[dict]:
    serve = "import sys; from t2g_core.testing.openai_server import main; main(sys.argv[1:])"
    server = subprocess.Popen(
        [sys.executable, "-c", serve, "--latency", str(latency)], stdout=subprocess.PIPE, text=True
    )
    try:
        base_url = server.stdout.readline().strip()
        out = []
        for c in levels:
            n, limit = waves * c, c / latency
            for backend in ("aiohttp", "httpx"):
                llm = {"annotator": "llm", "base_url": base_url, "model": "bench", "timeout_s": 30, "max_retries": 0}
                cfg = AnnotateConfig(**llm, concurrency=c, http_backend=backend)
                annotate(_items(c), cfg, progress=False)  # warm-up: imports
                best, cpu_ms = 0.0, 0.0
                for _ in range(rounds):
                    with tempfile.TemporaryDirectory(dir=cache_parent) as cache:  # the answer cache on, as in real runs
                        start, cpu = time.perf_counter(), time.process_time()
                        run = annotate(_items(n), cfg, progress=False, cache_dir=cache)
                        elapsed = time.perf_counter() - start
                    assert run.stats["status_counts"]["ok"] == n == run.stats["requests"], run.stats
                    if n / elapsed > best:
                        best, cpu_ms = n / elapsed, (time.process_time() - cpu) / n * 1000
                out.append(
                    {
                        "concurrency": c,
                        "http_backend": backend,
                        "items": n,
                        "items_per_s": round(best, 2),
                        "limit_items_per_s": limit,
                        "fraction_of_limit": round(best / limit, 3),
                        "client_cpu_ms_per_item": round(cpu_ms, 2),
                    }
                )
                print(
                    f"concurrency {c:>3} ({backend:>7}): {best:7.1f} items/s of {limit:6.1f} possible "
                    f"-> {best / limit:.3f}, client CPU {cpu_ms:.2f} ms/item",
                    flush=True,
                )
            raw = asyncio.run(_raw_ceiling(base_url, c, n, latency))
            for row in out[-2:]:
                row["bare_httpx_fraction"] = round(raw, 3)
            print(f"concurrency {c:>3} (bare httpx, no SDK, no annotator): {raw:.3f}", flush=True)
        return out
    finally:
        server.kill()
        server.wait()


def _overlap(response: str, quote: str, span: tuple[int, int]) -> bool:
    pos = response.find(quote)
    return pos >= 0 and pos < span[1] and pos + len(quote) > span[0]


def _row(p: dict, response: str) -> dict:
    code = {"tests": p["test"], "entry_point": p["entry_point"], "meta": {}}
    return {"id": p["task_id"], "task": "code", "prompt": p["prompt"], "response": response, **code}


def localisation(n_problems: int, seed: int, workers: int, mutation: bool = True) -> dict:
    critic = CodeCritic(SandboxLimits(timeout_s=5.0), mutation_localisation=mutation)
    rng = random.Random(seed)
    problems = list(load_problems())[:n_problems]
    picked = {p["task_id"]: rng.choice(ms) for p in problems if (ms := mutants(p["prompt"], p["canonical_solution"]))}

    def canonical(p):
        return critic.critique(_row(p, p["canonical_solution"]))

    def mutant(p):
        return critic.critique(_row(p, picked[p["task_id"]].response))

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        canon = list(pool.map(canonical, problems))
        muts = list(pool.map(mutant, [p for p in problems if p["task_id"] in picked]))
    elapsed = time.perf_counter() - start
    false_alarms = [
        p["task_id"]
        for p, fb in zip(problems, canon, strict=True)
        if fb.poor_spans or fb.status != "ok" or "passes all" not in fb.critique
    ]
    by_kind: dict[str, Counter] = defaultdict(Counter)
    hits = top1 = caught = n_spans = 0
    for p, fb in zip([p for p in problems if p["task_id"] in picked], muts, strict=True):
        m = picked[p["task_id"]]
        if fb.status != "ok" or "passes all" in (fb.critique or ""):
            by_kind[m.kind]["survived"] += 1
            continue
        caught += 1
        n_spans += len(fb.poor_spans)
        hit = any(_overlap(m.response, q, m.span) for q in fb.poor_spans)
        hits += hit
        top1 += bool(fb.poor_spans) and _overlap(m.response, fb.poor_spans[0], m.span)
        by_kind[m.kind]["hit" if hit else "miss"] += 1
    return {
        "problems": len(problems),
        "isolation": isolation.resolve("auto").backend,
        "canonical_false_alarms": len(false_alarms),
        "false_alarm_rate": len(false_alarms) / len(problems),
        "false_alarm_ids": false_alarms,
        "mutants": len(picked),
        "mutants_caught_by_tests": caught,
        "hit_rate": round(hits / max(caught, 1), 3),
        "top1_hit_rate": round(top1 / max(caught, 1), 3),
        "mean_poor_spans": round(n_spans / max(caught, 1), 2),
        "by_kind": {k: dict(v) for k, v in by_kind.items()},
        "seconds": round(elapsed, 1),
        "workers": workers,
        "mutation_localisation": mutation,
    }


def sandbox_overhead(cases: int, repeats: int) -> dict:
    """Seconds per case of ``return x`` under each backend (start-up of both processes included, once per run)."""
    out = {}
    tests = [{"code": f"def check(candidate):\n    assert candidate({i}) == {i}\n"} for i in range(cases)]
    for backend in ("bwrap", "unshare"):
        if not isolation.works(backend):
            continue
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run = run_cases("def f(x):\n    return x\n", tests, "f", SandboxLimits(isolation=backend))
            times.append(time.perf_counter() - start)
            assert all(r.outcome == "pass" for r in run.results), run
        out[backend] = {
            "cases": cases,
            "seconds_per_run": round(min(times), 4),
            "seconds_per_case": round(min(times) / cases, 5),
        }
    return out


def reference_cost(sizes_kb: list[int]) -> list[dict]:
    """Reference-critic seconds per item for responses of growing length."""
    row = make_demo_feedback("summarization", 1, seed=3).iloc[0].to_dict()
    row["meta"] = json.loads(row["meta"])
    critic, out = ReferenceCritic(), []
    for kb in sizes_kb:
        copies = max(1, kb * 1000 // (len(row["response"]) + 22))
        response = " ".join([row["response"], "Bo lives in Atlantis."] * copies)
        start = time.perf_counter()
        critic.critique(dict(row, response=response))
        seconds, size = time.perf_counter() - start, len(response) / 1000
        out.append({"kb": round(size, 1), "seconds": round(seconds, 4), "seconds_per_kb": round(seconds / size, 5)})
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--quick", action="store_true", help="fewer items and problems")
    ap.add_argument("--workers", type=int, default=2, help="code-critic sandboxes in parallel")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--waves", type=int, default=30, help="items per run = waves x concurrency (30: about 3 s per run)")
    args = ap.parse_args()
    out = results_dir(args.smoke) / "bench_annotate.json"
    out.parent.mkdir(parents=True, exist_ok=True)  # the answer caches of the throughput runs live beside it
    result = {"latency_s": args.latency}
    if args.smoke:
        result["throughput"] = throughput(0.01, [1, 4], waves=2, rounds=1, cache_parent=out.parent)
    else:
        waves, rounds = (10, 1) if args.quick else (args.waves, 2)
        result["throughput"] = throughput(args.latency, [1, 8, 32], waves, rounds, cache_parent=out.parent)
    result["sandbox"] = sandbox_overhead(4 if args.smoke else 20, 1 if args.smoke else 3)
    print("sandbox seconds per case:", {k: v["seconds_per_case"] for k, v in result["sandbox"].items()})
    result["reference_critic"] = reference_cost([1, 4] if args.smoke else [1, 4, 16, 64, 256, 1024])
    print("reference critic:", ", ".join(f"{r['kb']} KB {r['seconds']} s" for r in result["reference_critic"]))
    n_problems = 3 if args.smoke else 40 if args.quick else 164
    if not args.smoke:  # the same mutants without mutation-based localisation (Ochiai and the return-None rule)
        base = result["code_critic_without_mutation"] = localisation(n_problems, args.seed, args.workers, False)
        print(f"without mutation-based localisation: hit rate {base['hit_rate']} (top-1 {base['top1_hit_rate']})")
    result["code_critic"] = loc = localisation(n_problems, args.seed, args.workers)
    print(
        f"code critic: false alarms {loc['canonical_false_alarms']}/{loc['problems']}, hit rate {loc['hit_rate']} "
        f"(top-1 {loc['top1_hit_rate']}, {loc['mean_poor_spans']} poor spans/item) on "
        f"{loc['mutants_caught_by_tests']} caught mutants "
        f"({loc['mutants'] - loc['mutants_caught_by_tests']} survived the tests), {loc['seconds']} s"
    )
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
