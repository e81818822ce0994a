"""``t2g annotate``: critiques and quoted spans for every feedback item (LLM, code critic or reference critic)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, echo, fail, guard, pipeline_config


def _overrides(annotator, base_url, model, concurrency, mode, only_failed) -> list[str]:
    pairs = {"annotator": annotator, "base_url": base_url, "model": model, "concurrency": concurrency, "mode": mode}
    out = [f"annotate.{k}={json.dumps(v)}" for k, v in pairs.items() if v is not None]
    return out + (["annotate.only_failed=true"] if only_failed else [])


def _write(frame, output: Path, cfg, feedback: Path, extra: dict) -> str:
    from t2g_core.store import ArtifactStore, artifact_key, sha256_file, write_parquet

    if output.suffix == ".parquet":
        write_parquet(frame, output, "annotations")
        output.with_suffix(".stats.json").write_text(json.dumps(extra, indent=2), encoding="utf-8")
        return str(output)
    src = feedback / "data.parquet" if feedback.is_dir() else feedback
    key = artifact_key("annotations", cfg, {"feedback": sha256_file(src)} if src.is_file() else None)
    return ArtifactStore(output.parent).write(output.name, key, frame, "annotations", extra=extra).path


def _previous(path: Path | None, output: Path):
    from t2g_core.store import read_artifact

    path = path or output
    if not path.exists():
        fail(f"--only-failed needs the previous annotations: {path} does not exist (give --previous PATH)")
    return read_artifact(path, "annotations")


def _print_stats(stats: dict) -> None:
    counts = ", ".join(f"{k}: {v}" for k, v in stats["status_counts"].items() if v)
    echo(f"  items {stats['n_items']} ({counts})")
    echo(f"  tokens prompt {stats['prompt_tokens']}, completion {stats['completion_tokens']}, cost {stats['cost']:.4f}")
    echo(
        f"  this run: {stats['requests']} requests, {stats['cache_hits']} cache hits, cost {stats['cost_this_run']:.4f}"
        + (f", {stats['kept_from_previous']} ok items kept" if stats["kept_from_previous"] else "")
    )


@guard
def annotate(
    feedback: Path = typer.Argument(..., help="Feedback file or artifact folder (Parquet, JSONL, CSV)."),
    output: Path = typer.Option(..., "--output", "-o", help="Annotations Parquet file (.parquet) or artifact folder."),
    annotator: str | None = typer.Option(None, help="llm | code | reference (default from config)."),
    base_url: str | None = typer.Option(None, help="OpenAI-compatible endpoint for --annotator llm."),
    model: str | None = typer.Option(None, help="Model name for --annotator llm."),
    concurrency: int | None = typer.Option(None, help="Requests (or sandboxes) in flight at once."),
    mode: str | None = typer.Option(None, help="critique | grounding (tie the item's human critique to spans)."),
    only_failed: bool = typer.Option(
        False, "--only-failed", help="Keep the ok items of the previous annotations; redo the rest."
    ),
    previous: Path | None = typer.Option(None, help="Previous annotations for --only-failed (default: the -o path)."),
    cache_dir: Path | None = typer.Option(None, help="LLM answer cache (default <workspace>/cache/annotate)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Annotate every item; print counts per status, tokens and cost. The API key comes from the env var in config."""
    from t2g_core.annotators import annotate as run_annotate
    from t2g_core.feedback import load_feedback

    pcfg = pipeline_config(
        config, [*(set_ or []), *_overrides(annotator, base_url, model, concurrency, mode, only_failed)]
    )
    cfg = pcfg.annotate
    if cfg.annotator == "llm" and not cfg.base_url:
        fail("--annotator llm needs --base-url (an OpenAI-compatible endpoint)")
    df = load_feedback(feedback)
    prev = _previous(previous, output) if cfg.only_failed else None
    api_key = os.environ.get(cfg.api_key_env) if cfg.annotator == "llm" else None
    cache = cache_dir or Path(pcfg.workspace.root) / "cache" / "annotate"
    try:
        run = run_annotate(df, cfg, api_key=api_key, cache_dir=cache, progress=not quiet, previous=prev)
    except ValueError as exc:
        fail(str(exc))
    where = _write(run.frame, output, cfg, feedback, {"stats": run.stats})
    echo(f"annotations: {where} ({len(run.frame)} items, annotator {cfg.annotator})")
    _print_stats(run.stats)


def register(app: typer.Typer) -> None:
    app.command("annotate")(annotate)
