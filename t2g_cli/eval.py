"""``t2g eval``: evaluate policies on held-out prompts and compare them with intervals; regenerate reports."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, artifact, echo, fail, guard, pipeline_config, stage_context
from t2g_core.config.stages import EvaluateSettings
from t2g_core.stages.refs import PolicySet
from t2g_env import api_key
from t2g_mlflow.registry import resolve_model_ref

eval_app = typer.Typer(
    help="Evaluate policies: task metrics, paired-bootstrap comparisons, reports.", no_args_is_help=True
)


def parse_model_refs(refs: list[str], workspace=None) -> dict[str, Path]:
    """``NAME=REF`` or ``REF`` -> ordered {name: folder or Hub id}; REF is a folder, a Hub id (``ORG/NAME[@REV]``,
    from the local Hugging Face cache when offline) or ``models:/NAME@ALIAS`` (MLflow registry)."""
    from t2g_core.models.loading import is_hub_id

    out: dict[str, Path | str] = {}
    for ref in refs:
        name, _, path = ref.partition("=") if "=" in ref else (_default_name(ref), "", ref)
        if not name or not path:
            fail(f"--model {ref!r}: expected NAME=FOLDER or FOLDER")
        if name in out:
            fail(f"--model {ref!r}: the name {name!r} is used twice; write NAME=FOLDER to tell them apart")
        if path.startswith("models:/"):
            try:
                path = str(resolve_model_ref(path, workspace))
            except Exception as exc:  # noqa: BLE001 - registry lookups fail in many ways; one clear line
                fail(f"--model {ref!r}: cannot fetch it from the MLflow registry ({type(exc).__name__}: {exc})")
        if not Path(path).is_dir() and not is_hub_id(path):
            fail(f"--model {ref!r}: {path} is not a folder (model or PEFT adapter) nor a Hub id (ORG/NAME[@REVISION])")
        out[name] = path if is_hub_id(path) else Path(path)
    return out


def _default_name(ref: str) -> str:
    return ref.removeprefix("models:/").replace("/", "-") if ref.startswith("models:/") else Path(ref).name


def _device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@eval_app.command("policy")
@guard
def policy(
    model: list[str] = typer.Option(
        ...,
        "--model",
        "-m",
        help="NAME=REF or REF: a model folder, a PEFT adapter folder, a Hugging Face id ORG/NAME[@REVISION] or "
        "models:/NAME@ALIAS from the MLflow registry (repeatable; the first is the baseline).",
    ),
    data: Path = typer.Option(
        ..., "--data", "-d", help="Feedback file or artifact folder holding the held-out prompts."
    ),
    task: str = typer.Option(..., "--task", "-t", help="summarization, code or qa."),
    output: Path = typer.Option(..., "--output", "-o", help="Results folder (items.parquet, summary.json, report/)."),
    baseline: str | None = typer.Option(None, help="Policy name to compare against (default: the first --model)."),
    judge_api_key_env: str | None = typer.Option(
        None, help="Environment variable holding the judge's API key (default: evaluate.judge_api_key_env)."
    ),
    device: str = typer.Option("auto", help="cpu, cuda or auto."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Generate with every policy on the same prompts, score them, compare with the baseline; print the table."""
    from t2g_core.evaluation import EvalResults, comparison_table
    from t2g_core.evaluation.judge import judge_for
    from t2g_core.stages import evaluate

    key_env = [f"evaluate.judge_api_key_env={json.dumps(judge_api_key_env)}"] if judge_api_key_env else []
    pipeline = pipeline_config(config, [*(set_ or []), f"evaluate.task={task}", *key_env])
    settings = EvaluateSettings.from_pipeline(pipeline)
    cfg = settings.evaluate
    policies = parse_model_refs(model, pipeline.workspace)
    if baseline is not None and baseline not in policies:
        fail(f"--baseline {baseline!r} is not one of the --model names {list(policies)}")
    judge = judge_for(cfg, api_key(settings))
    chosen = PolicySet(models={n: str(p) for n, p in policies.items()}, baseline=baseline)
    data_ref = artifact(data, "feedback")
    ctx = stage_context(
        "evaluate", pipeline.workspace.root, {"data": data_ref, "policies": chosen, "settings": settings}, output
    )
    try:
        ref = evaluate.evaluate(
            data_ref, chosen, settings, replace(ctx, force=True), judge=judge, device=_device(device)
        )
    except ValueError as exc:
        fail(str(exc))
    echo(comparison_table(EvalResults.load(ref.path)))
    echo(f"results: {ref.path} (report: {ref.report})")


def _histories(specs: list[str]):
    from t2g_core.evaluation.report import load_history

    out = {}
    for spec in specs:
        name, _, path = spec.partition("=") if "=" in spec else (Path(spec).stem, "", spec)
        if not Path(path).is_file():
            fail(f"--history {spec!r}: {path} is not a file")
        out[name] = load_history(path)
    return out


@eval_app.command("report")
@guard
def report(
    results: list[Path] = typer.Argument(
        ..., help="One or more results folders of the same task (merged into one comparison)."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Report folder (default: <first results>/report)."),
    baseline: str | None = typer.Option(None, help="Policy to compare against (default: the first results' baseline)."),
    history: list[str] | None = typer.Option(
        None,
        "--history",
        help="NAME=FILE: a PPO metric history (JSON/JSONL/CSV/Parquet) for learning curves (repeatable).",
    ),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Regenerate the markdown table and PNG charts from saved results (and PPO histories)."""
    from t2g_core.evaluation import EvalResults, comparison_table, merge_results, write_report

    cfg = pipeline_config(config, set_).evaluate
    try:
        loaded = [EvalResults.load(p) for p in results]
        merged = merge_results(loaded, cfg, baseline)  # recomputed from the items: --set evaluate.* applies
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    out = output or results[0] / "report"
    files = write_report(merged, out, _histories(history or []))
    echo(comparison_table(merged))
    echo(f"report: {files['report_md']}")


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")
