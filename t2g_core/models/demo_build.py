"""The tiny local models of a pipeline run, built once per (config, feedback) in phases that each resume: a tokenizer,
a small causal LM warm-started on the feedback (the reward-model base) and the policy fine-tuned from it
(docs/pipeline.md, "How the tiny demo models are built").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from t2g_core.config.models import ModelsConfig
from t2g_core.models.tiny import SIZES, TinySpec, WarmStartResult, build_tiny_model, train_tokenizer, warm_start
from t2g_core.policy_prompts import render_policy_prompt
from t2g_core.progress import Progress, as_progress
from t2g_core.training import publish_folder, staging_folder, writer_token

BUILD_VERSION = "1"  # bump when the build recipe changes so cached folders are rebuilt


@dataclass(frozen=True)
class DemoModels:
    """Folders (or Hugging Face ids) of the reward-model base and of the warm-started policy."""

    base: Path
    policy: Path


def _frame_digest(df: pd.DataFrame) -> str:
    payload = df.to_json(orient="records", force_ascii=False).encode()
    return hashlib.sha256(payload).hexdigest()


def demo_models_key(spec: TinySpec, feedback_df: pd.DataFrame) -> str:
    """Hash of the build recipe version, the builder's spec (less how often it checkpoints) and the feedback."""
    parts = [BUILD_VERSION, spec.model_dump_json(exclude={"checkpoint_every"}), _frame_digest(feedback_df)]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def ensure_demo_models(
    models_dir: str | Path,
    cfg: ModelsConfig,
    feedback_df: pd.DataFrame,
    *,
    progress: Progress | bool = True,
    log: Callable[[str], None] | None = None,
    rebuild: bool = False,
    spec: TinySpec | None = None,
) -> DemoModels:
    """Build (once) the tiny base LM and the warm-started policy for ``feedback_df``'s task; reuse them afterwards.

    ``models_dir/tiny-<key>/{base,policy}`` with key = hash(config, data). The build works in the hidden folder
    ``.tiny-<key>.partial``, renamed into place when complete, so an unfinished build never looks complete; an
    interrupted build (a time limit, a kill) leaves that folder and the next call resumes it from its last finished
    phase and checkpoint. One process builds a key at a time (a lock beside the folder); the others wait and reuse
    it. Models given as a Hugging Face id or folder (``cfg.policy`` / ``cfg.reward_model_base`` not ``"tiny"``) are
    returned as they are. ``rebuild`` builds from scratch and swaps the new folder in for a finished one. The models
    are built to ``spec`` (default: the named size ``cfg.tiny``).
    """
    if cfg.policy != "tiny" and cfg.reward_model_base != "tiny":
        return DemoModels(base=Path(cfg.reward_model_base), policy=Path(cfg.policy))
    models_dir, spec = Path(models_dir), spec or SIZES[cfg.tiny]
    final = models_dir / f"tiny-{demo_models_key(spec, feedback_df)}"
    if rebuild or not (final / "build.json").exists():
        models_dir.mkdir(parents=True, exist_ok=True)
        with _build_lock(models_dir / f".{final.name}.lock"):
            if rebuild or not (final / "build.json").exists():  # another process may have built it meanwhile
                _build_into(final, spec, feedback_df, progress=as_progress(progress), log=log, fresh=rebuild)
    base = final / "base" if cfg.reward_model_base == "tiny" else Path(cfg.reward_model_base)
    policy = final / "policy" if cfg.policy == "tiny" else Path(cfg.policy)
    return DemoModels(base=base, policy=policy)


@contextlib.contextmanager
def _build_lock(path: Path):
    """An exclusive lock on ``path`` (released by the kernel if the process dies); the file is removed after a
    successful build."""
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
        path.unlink(missing_ok=True)  # only after success: a failed build leaves it, with its partial folder


def _build_into(final: Path, cfg: TinySpec, feedback_df: pd.DataFrame, *, progress, log, fresh: bool) -> None:
    work = final.with_name(f".{final.name}.partial")
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
    elif work.exists():
        (log or _quiet)(f"model build resumes from {work} (what it finished is kept)")
    work.mkdir(parents=True, exist_ok=True)
    _build_demo_models(work, cfg, feedback_df, progress=progress, log=log or _quiet)
    if final.exists():  # a rebuild: the finished folder is replaced only once the new one is complete
        os.rename(final, old := final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:6]}"))
        shutil.rmtree(old)
    os.rename(work, final)


def _quiet(_message: str) -> None:
    return None


def _main_task(feedback_df: pd.DataFrame) -> str:
    if feedback_df.empty:
        raise ValueError("ensure_demo_models: the feedback frame is empty")
    return str(feedback_df["task"].mode().iloc[0])


def _policy_pairs(
    task: str, feedback_df: pd.DataFrame, cfg: TinySpec, p_halluc: float, seed: int
) -> list[tuple[str, str]]:
    """(prompt, target response) pairs for the policy's supervised warm start.

    Summarization: fresh synthetic posts whose summaries get each fact wrong with probability ``p_halluc``. Other
    tasks: the feedback's references (or responses when no reference exists).
    """
    if task == "summarization":
        from t2g_core.demo.summarization import warm_start_pairs

        return warm_start_pairs(cfg.policy_sft_examples, seed=seed, p_halluc=p_halluc)
    rows = feedback_df[feedback_df["task"] == task]
    return [
        (r.prompt, r.reference if isinstance(r.reference, str) and r.reference else r.response)
        for r in rows.itertuples()
    ]


def _phase(root: Path, name: str, run: Callable[[Path], dict], log) -> dict:
    """Run one build phase into ``root/name`` unless a previous call finished it; returns what it reports.

    A phase writes its folder last (``root/name`` appears complete or not at all) and its report beside it; a phase
    that was interrupted resumes from ``root/checkpoints/name`` (see :func:`warm_start`)."""
    report = root / f"{name}.json"
    if (root / name).is_dir() and report.is_file():
        return json.loads(report.read_text(encoding="utf-8"))
    info = run(root / "checkpoints" / name)
    report.write_text(json.dumps(info), encoding="utf-8")
    shutil.rmtree(root / "checkpoints" / name, ignore_errors=True)
    return info


def _trained(result: WarmStartResult, what: str, log) -> dict:
    resumed = f", resumed at step {result.resumed_step}" if result.resumed_step else ""
    log(f"{what}: {len(result.losses)} steps in {result.seconds:.1f} s{resumed}, loss {_first_last(result.losses)}")
    return {"losses": _first_last(result.losses), "resumed_step": result.resumed_step}


def _train_policy(root: Path, tokenizer, task: str, feedback_df: pd.DataFrame, cfg: TinySpec, *, progress, log):
    """Two supervised phases from the base LM: (1) clean targets, so the copy-a-value-from-the-post circuit forms
    quickly; (2) for summarization, targets with each fact wrong at ``cfg.p_halluc``, so the policy keeps the template
    and the lookup but states wrong values often enough for PPO to have errors to remove. Each phase writes its own
    folder (``policy-clean``, then ``policy``), so an interrupted phase restarts from a folder it never changed."""

    def rendered(pairs):
        return [(render_policy_prompt(tokenizer, task, p), r) for p, r in pairs]

    noisy_phase = task == "summarization" and cfg.policy_noise_steps > 0
    clean_dir = "policy-clean" if noisy_phase else "policy"

    def sft_phase(start: str, out: str, p_halluc: float, seed: int, steps: int, lr: float, what: str):
        def run(ckpt: Path) -> dict:
            pairs = rendered(_policy_pairs(task, feedback_df, cfg, p_halluc, cfg.seed + seed))
            kw = {"steps": steps, "lr": lr, "batch_size": cfg.policy_sft_batch_size, "out_dir": root / out}
            result = warm_start(root / start, pairs, cfg, **kw, progress=progress, checkpoint_dir=ckpt, log=log)
            return {**_trained(result, what, log), "n_policy_pairs": len(pairs)}

        return run

    clean = sft_phase("base", clean_dir, 0.0, 1000, cfg.policy_sft_steps, cfg.policy_sft_lr, "policy SFT (clean)")
    what = f"policy SFT (p_halluc={cfg.p_halluc})"
    noise = sft_phase("policy-clean", "policy", cfg.p_halluc, 2000, cfg.policy_noise_steps, cfg.policy_noise_lr, what)

    sft = _phase(root, clean_dir, clean, log)
    info = {"sft_losses": sft["losses"], "n_policy_pairs": sft["n_policy_pairs"]}
    resumed = {"policy_sft": sft["resumed_step"]}
    if noisy_phase:
        noised = _phase(root, "policy", noise, log)
        info["noise_losses"] = noised["losses"]
        resumed["policy_noise"] = noised["resumed_step"]
        shutil.rmtree(root / "policy-clean")
    return info, resumed


def _build_demo_models(root: Path, cfg: TinySpec, feedback_df: pd.DataFrame, *, progress: Progress, log) -> None:
    """The phases of a build, each skipped when an earlier call finished it: tokenizer, initial weights, the LM warm
    start (``init`` -> ``base``), the policy's supervised phases (``base`` -> ``policy``)."""
    from t2g_core.demo import demo_corpus

    t0, c0 = time.perf_counter(), time.process_time()
    task = _main_task(feedback_df)
    pairs = _policy_pairs(task, feedback_df, cfg, cfg.p_halluc, cfg.seed + 3000)
    corpus = demo_corpus(feedback_df) + [f"{p}\n{r}" for p, r in pairs[: len(feedback_df) * 4]]

    def tokenizer_phase(_ckpt: Path) -> dict:
        tmp = staging_folder(root / "tokenizer", writer_token(), create=True)
        tok = train_tokenizer(corpus, cfg.vocab_size, tmp)
        publish_folder(tmp, root / "tokenizer")
        log(f"tokenizer: {len(tok)} tokens from {len(corpus)} texts")
        return {}

    def init_phase(_ckpt: Path) -> dict:
        tmp = staging_folder(root / "init", writer_token(), create=True)
        build_tiny_model(tmp, root / "tokenizer", cfg)
        publish_folder(tmp, root / "init")
        return {}

    def lm_phase(ckpt: Path) -> dict:
        result = warm_start(
            root / "init",
            corpus,
            cfg,
            block_size=cfg.warm_start_block_size,
            out_dir=root / "base",
            progress=progress,
            checkpoint_dir=ckpt,
            log=log,
        )
        return _trained(result, "base LM warm start", log)

    _phase(root, "tokenizer", tokenizer_phase, log)
    _phase(root, "init", init_phase, log)
    lm = _phase(root, "base", lm_phase, log)
    from transformers import AutoTokenizer

    info, resumed = _train_policy(
        root, AutoTokenizer.from_pretrained(root / "tokenizer"), task, feedback_df, cfg, progress=progress, log=log
    )
    for leftover in ("tokenizer", "init", "checkpoints"):
        shutil.rmtree(root / leftover, ignore_errors=True)
    for report in root.glob("*.json"):
        report.unlink()
    info.update(
        {
            "task": task,
            "config": cfg.model_dump(mode="json"),
            "seconds": round(time.perf_counter() - t0, 2),
            "cpu_seconds": round(time.process_time() - c0, 2),
            "lm_losses": lm["losses"],
            "resumed_at_step": {"lm_warm_start": lm["resumed_step"], **resumed},
        }
    )
    (root / "build.json").write_text(json.dumps(info, indent=2))


def _first_last(losses: list[float]) -> str:
    return f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "n/a"
