"""What the benchmarks share: where results go, the PPO tasks, the tiny smoke models, the job process.

Every script imports it as a sibling package (``from testbed import ...``); what each part is for:
docs/benchmarks.md, "What the scripts share".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from t2g_core.config.ppo import PPOConfig
from testbed import curves
from testbed.devices import NoisyCritic
from testbed.humaneval import Code
from testbed.tasks import KeptResponses, PPOTask, Summarization, fact_profile, train_evaluated

ROOT = Path(__file__).resolve().parents[2]
RESULTS_ENV = "T2G_BENCH_RESULTS"


def results_dir(smoke: bool = False) -> Path:
    """Where a benchmark writes its results (``smoke``: the smoke/ subfolder of it)."""
    root = Path(os.environ.get(RESULTS_ENV) or ROOT / "benchmarks" / "results")
    return root / "smoke" if smoke else root


def parser(doc: str, publish: bool = False) -> argparse.ArgumentParser:
    """A benchmark's parser: its docstring as help, ``--smoke`` and (``publish``) ``--publish``."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="A tiny run that only proves the script works (the suite).")
    if publish:
        p.add_argument("--publish", action="store_true", help="Copy the summary JSON to docs/results/ (to commit).")
    return p


def save_json(path: Path, obj, indent: int = 1, note: str = "") -> None:
    """Write ``obj`` to ``path`` (its folder made; what JSON has no type for as text) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=indent, default=str), encoding="utf-8")
    print(f"results: {path}{note}")


PUBLISHED = ROOT / "docs" / "results"  # the committed summaries every docs figure is read from


def write_results(name: str, full: dict, summary: dict, *, smoke: bool, publish: bool) -> Path:
    """``<name>.json`` (everything, per run) and ``<name>.summary.json`` (a few KB: what the docs quote) in the
    results folder; ``publish`` also copies the summary to ``docs/results/<name>.json``, to be committed beside the
    docs that quote it. Returns the summary's path."""
    if publish and smoke:
        raise SystemExit("--publish: a --smoke run only proves the script works; it is never published")
    out = results_dir(smoke)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(full, indent=1), encoding="utf-8")
    path = out / f"{name}.summary.json"
    path.write_text(compact_json(rounded(summary)) + "\n", encoding="utf-8")
    if publish:
        PUBLISHED.mkdir(parents=True, exist_ok=True)
        (PUBLISHED / f"{name}.json").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        print(f"published: {PUBLISHED / (name + '.json')}")
    return path


def compact_json(obj) -> str:
    """Indented JSON with each list of plain values on one line: small, and a changed figure is a one-line diff."""
    text = json.dumps(obj, indent=1)
    flat = re.compile(r"\[\n\s*([^\[\]{}]*?)\n\s*\]")  # a list holding no list or object
    return flat.sub(lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text)


def rounded(obj, digits: int = 4):
    """``obj`` with every float rounded to ``digits`` significant digits (a summary stays small and diffable)."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}") if math.isfinite(obj) else None  # strict JSON has no NaN
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [rounded(v, digits) for v in obj]
    return obj


PPO_SMOKE_WORK = results_dir(smoke=True) / "work-ppo"  # bench_ppo_sample_efficiency --smoke's models; bench_ppo_step's
RM_SMOKE_WORK = results_dir(smoke=True) / "bench_rm_work"  # bench_rm --smoke's models; bench_rm_ppo --smoke's
RM_SMOKE_ITEMS = 24
SMOKE_TINY_MODELS = ["models.tiny=smoke"]  # demo models that only have to exist: a few steps of each build
RM_SMOKE_OVERRIDES = [  # a base that only has to exist, a few training steps
    f"data.n_items={RM_SMOKE_ITEMS}",
    "checks.small_tagger_data=true",  # a smoke run: the tagger on too few items is meant
    *SMOKE_TINY_MODELS,
    "reward_model.max_steps=2",
    "reward_model.max_new_tokens=16",
    "reward_model.max_target_tokens=4096",
    "reward_model.max_prompt_tokens=4096",
]
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "DO_NOT_TRACK": "1",
}
JOB_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def stay_offline() -> None:
    """Default the Hub and telemetry switches to off in this process and those it starts (the models are local)."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


def run_job(cmd: list[str], label: str) -> None:
    """One benchmark run as a 1-thread process from the repository root; raises with its stderr's tail if it fails."""
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **JOB_ENV}, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{proc.stderr[-3000:]}")
    print(f"  {label}: {time.time() - t0:.0f} s", flush=True)


def run_spec_file(path: str, run) -> None:
    """The runs a ``--run-specs`` file lists, one after another in this 1-thread process: ``run(spec, out)``'s record
    goes to ``out/run.json`` (a run whose run.json exists is skipped)."""
    import torch

    torch.set_num_threads(1)
    for spec in json.loads(Path(path).read_text(encoding="utf-8")):
        out = Path(spec["out"])
        if not (out / "run.json").exists():
            record = run(spec, out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "run.json").write_text(json.dumps(record), encoding="utf-8")


def key_of(obj, n: int = 10) -> str:
    """The first ``n`` hex digits of the sha256 of ``obj`` as JSON: the name of a run folder keyed by what shapes it."""
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()[:n]


def shared_flags(args, names) -> list[str]:
    """``--smoke`` when set, then ``--NAME VALUE`` of each of ``names``: the settings every run process shares."""
    return (["--smoke"] if args.smoke else []) + [
        x for k in names if k != "smoke" for x in (f"--{k.replace('_', '-')}", str(getattr(args, k)))
    ]


def run_in_processes(cmd: list[str], specs: list[dict], workdir: str | Path, workers: int, per_process: int) -> list:
    """Every spec whose ``out`` folder holds no ``run.json`` yet, ``per_process`` of them one after another in each
    1-thread process ``cmd --run-specs FILE`` (FILE, under ``workdir/specs/``, lists them), ``workers`` processes at a
    time; returns every spec's ``run.json``, in order. A run that finished before is not run again."""
    pending = [sp for sp in specs if not (Path(sp["out"]) / "run.json").exists()]
    chunks = [pending[i : i + per_process] for i in range(0, len(pending), per_process)]

    def launch(chunk: list[dict]) -> None:
        path = Path(workdir) / "specs" / f"{key_of(chunk, 12)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(chunk), encoding="utf-8")
        label = " ".join(str(v) for k, v in chunk[0].items() if k in ("arm", "name", "warm_start", "seed"))
        run_job([*cmd, "--run-specs", str(path)], f"{label} (+{len(chunk) - 1} more)" if len(chunk) > 1 else label)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(launch, chunks))
    return [json.loads((Path(sp["out"]) / "run.json").read_text(encoding="utf-8")) for sp in specs]


TASKS: dict[str, type[PPOTask]] = {"summarization": Summarization, "code": Code}
__all__ = ["TASKS", "curves", "KeptResponses", "NoisyCritic", "PPOTask", "Summarization", "fact_profile"]
__all__ += ["train_evaluated"]


def oracle_ppo_config(args, seed: int, fields: dict):
    """The PPO sweeps' PPOConfig: the oracle critic, 4 epochs, KL 0.05 in the reward, gamma 1, one log and save at the
    end, no heatmaps; ``fields`` over it."""
    base = dict(reward_source="oracle", steps=args.steps, batch_size=args.batch_size, ppo_epochs=4, kl_coef=0.05)
    base |= dict(gamma=1.0, sampling={"max_new_tokens": args.max_new_tokens}, log_every=args.steps)
    return PPOConfig(**(base | dict(save_every=args.steps, heatmap_samples=0, seed=seed) | fields))


def demo_policy(workdir: str, smoke: bool) -> str:
    """The demo's warm-started summarization policy, built as bench_ppo_sample_efficiency builds it (cached in
    ``workdir``): the shared starting point of the PPO cost benchmarks."""
    build = argparse.Namespace(
        workdir=workdir, sft_steps=5 if smoke else 600, lm_steps=0 if smoke else 300, smoke=smoke
    )
    return str(Summarization(build).build_policy(0))


def estimator_arms(args) -> dict[str, dict]:
    """PPOConfig overrides by arm ``ESTIMATOR[/VALUE_MODEL]/BACKEND``: each of ``args.backends`` x ``args.estimators``
    x (critic-based estimators) ``args.value_models``; the critic-free ones sample ``args.group_size`` per prompt."""
    out = {}
    for backend in args.backends:
        for estimator in args.estimators:
            free = estimator in ("grpo", "rloo")
            for vm in ["head"] if free else args.value_models:
                kw = dict(advantage_estimator=estimator, value_model=vm, generation_backend=backend)
                out[f"{estimator}/{backend}" if free else f"{estimator}/{vm}/{backend}"] = kw | {
                    "group_size": args.group_size if free else 1
                }
    return out


def clock() -> tuple[float, float]:
    """(process CPU seconds, wall seconds) now, after the GPU's queued work has finished: on CPU the process time is
    what a loaded machine's other processes do not inflate; on a GPU only the synchronised wall time means anything."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.process_time(), time.perf_counter()


# dense bf16 tensor-core peaks in TFLOP/s (no sparsity); the first name in torch.cuda.get_device_name() wins
PEAK_BF16_TFLOPS = {"H200": 989.4, "H100 PCIe": 756.0, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "A10G": 125.0}
PEAK_BF16_TFLOPS |= {"L4": 121.0}


def peak_flops() -> float | None:
    """The GPU's dense bf16 peak in FLOP/s, or None (a CPU, or a GPU this table does not know)."""
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((v * 1e12 for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def random_llama(folder: Path, tokenizer_vocab: int, *, vocab: int = 0, device: str = "cpu", dtype=None, **shape):
    """The project's BPE tokenizer (``tokenizer_vocab`` tokens, trained on the demo corpus) and a random-initialised
    Llama of ``shape`` (vocabulary: ``vocab``, at least the tokenizer's), saved in ``folder``; returns the model."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from t2g_core.demo import demo_corpus, make_demo_feedback
    from t2g_core.models.tiny import train_tokenizer

    tok = train_tokenizer(demo_corpus(make_demo_feedback("summarization", 64, seed=0)), tokenizer_vocab, folder)
    ids = {f"{k}_token_id": getattr(tok, f"{k}_token_id") for k in ("bos", "eos", "pad")}
    config = LlamaConfig(vocab_size=max(vocab, len(tok)), tie_word_embeddings=True, **ids, **shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(folder)
    return model
