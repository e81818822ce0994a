"""``t2g annotate``: critiques and quoted spans for every feedback item (LLM, code critic or reference critic)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, artifact, echo, fail, guard, pipeline_config, read_extra, stage_context
from t2g_core.config.stages import AnnotateSettings
from t2g_core.stages import annotate as stage
from t2g_core.stages.labelling import TooManyFailures
from t2g_env import api_key


def _overrides(annotator, base_url, model, concurrency, mode, only_failed) -> list[str]:
    pairs = {"annotator": annotator, "base_url": base_url, "model": model, "concurrency": concurrency, "mode": mode}
    out = [f"annotate.{k}={json.dumps(v)}" for k, v in pairs.items() if v is not None]
    return out + (["annotate.only_failed=true"] if only_failed else [])


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
    annotator: str | None = typer.Option(None, help="llm | code | reference | ground (default from config)."),
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
    pcfg = pipeline_config(
        config, [*(set_ or []), *_overrides(annotator, base_url, model, concurrency, mode, only_failed)]
    )
    settings = AnnotateSettings.from_pipeline(pcfg)
    cfg = settings.annotate
    if cfg.annotator == "llm" and not cfg.base_url:
        fail("--annotator llm needs --base-url (an OpenAI-compatible endpoint)")
    fb = artifact(feedback, "feedback")
    prev = None
    if cfg.only_failed:
        prev_path = previous or output
        if not prev_path.exists():
            fail(f"--only-failed needs the previous annotations: {prev_path} does not exist (give --previous PATH)")
        prev = artifact(prev_path, "annotations")
    key = api_key(settings)
    params = {"feedback": fb, "settings": settings, "previous": prev}
    ctx = stage_context("annotate", pcfg.workspace.root, params, output, progress=not quiet)
    try:
        ref = stage.annotate(fb, settings, ctx, api_key=key, previous=prev, cache_dir=cache_dir)
    except TooManyFailures as exc:
        _report(exc.ref, cfg)
        fail(str(exc), code=1)
    except ValueError as exc:
        fail(str(exc))
    _report(ref, cfg)


def _report(ref, cfg) -> None:
    echo(f"annotations: {ref.path} ({ref.n_rows} items, annotator {cfg.annotator})")
    _print_stats(read_extra(ref)["stats"])


def register(app: typer.Typer) -> None:
    app.command("annotate")(annotate)
