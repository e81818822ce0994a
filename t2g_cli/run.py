"""``t2g run``, ``t2g demo`` and ``t2g lineage``: the Prefect pipeline and its MLflow lineage from the command line."""

from __future__ import annotations

import contextlib
import time
import traceback
from pathlib import Path

import typer

from t2g_cli import runtime
from t2g_cli._common import ConfigOpt, SetOpt, echo, fail, guard, pipeline_config
from t2g_cli.summary import summary_lines
from t2g_core.disk import out_of_space
from t2g_core.stages.context import GateFailed
from t2g_core.stages.feedback import source_frame
from t2g_core.stages.preflight import PreflightError, problems
from t2g_core.stages.registry import settings_for
from t2g_env import api_key
from t2g_mlflow.lineage import lineage_chain

RefreshOpt = typer.Option(
    None, "--refresh", "-r", help="Recompute this stage and everything after it even if cached (repeatable)."
)
WorkspaceOpt = typer.Option(None, "--workspace", "-w", help="Workspace folder (overrides workspace.root).")
PresetOpt = typer.Option(
    None,
    "--preset",
    "-p",
    help="Size preset applied before -c and --set: tiny (every stage in minutes, figures meaningless), small (half "
    "the demo's PPO and evaluation), full (the defaults).",
)


def _with_workspace(overrides: list[str] | None, workspace: Path | None) -> list[str]:
    return [*(overrides or []), *([f"workspace.root={workspace.resolve()}"] if workspace else [])]


def _run_pipeline(config, refresh: list[str] | None) -> tuple[dict, dict]:
    """Run the text2grad flow in this process (against `make up`'s server if running, else an ephemeral API); a
    failure ends the command with one line (:func:`_failed`), its tracebacks in the run log."""
    where = runtime.prepare_environment(config.workspace.root, start_prefect=True)
    echo(f"Prefect: {where['prefect']}\nMLflow:  {where['mlflow']}")
    from flows.text2grad import text2grad  # imported while the temporary server starts

    runtime.prefect_started()

    with runtime.run_log(config.workspace.root) as log:
        try:
            state = text2grad(config=config, refresh=refresh or None, return_state=True)
        except Exception as exc:  # noqa: BLE001 - the engine itself failed (its API server could not write)
            with contextlib.suppress(OSError), log.open("a", encoding="utf-8") as out:  # a full disk keeps it
                traceback.print_exception(exc, file=out)
            _failed("failed", exc, config.workspace.root, log)
    result = state.result(raise_on_failure=False)
    if not state.is_completed():
        _failed(state.name, result, config.workspace.root, log)
    return result, {**where, "flow_run_id": str(state.state_details.flow_run_id)}


def _failed(state: str, error: BaseException, workspace: str, log: Path) -> None:
    """Exit with one line: the cause once, and what to do. A gate stops the same command the same way, so its line
    ends with the setting to change; a full disk names the workspace and its free space."""
    if isinstance(error, PreflightError):
        fail(str(error))
    full = out_of_space(error, workspace)
    if full is not None:
        fail(full.strerror, code=1)
    notes = "".join(f" {note}" for note in getattr(error, "__notes__", ()))  # e.g. which time limit stopped it
    if isinstance(error, GateFailed):
        advice = "The same command stops here again: change the setting named above (or the data), then run again"
    else:
        advice = f"Fix the cause and run the same command again (Prefect's log with tracebacks: {log})"
    fail(f"pipeline {state}: {error}{notes} {advice}; completed stages are reused.", code=1)


def _preflight(cfg) -> None:
    """Before Prefect starts or a model is built: the annotator's endpoint, and a feedback file's rows against the
    annotator (``t2g_core.stages.preflight``); one message and exit 2 when they do not fit. Demo data and dataset
    adapters are checked by the annotation stage itself, which runs before the model build."""
    from t2g_core.annotators import feedback_rows

    own_file = cfg.data.dataset is None and cfg.data.source != "demo"
    rows = []
    if own_file:
        try:
            rows = feedback_rows(source_frame(cfg.data))
        except (FileNotFoundError, ValueError) as exc:
            fail(f"data.source {cfg.data.source}: {exc}")
    has_key = api_key(settings_for("annotate", cfg)) is not None
    message = problems(rows, cfg.annotate, has_key=has_key)
    if message:
        fail(f"{cfg.data.source}: {message}" if own_file else message)


def _run_and_summarise(
    config: Path | None, overrides: list[str] | None, refresh, workspace: Path | None, preset: str | None = None
) -> None:
    """The body of `t2g run` and `t2g demo`: the configuration, the pipeline, what it produced and where to look."""
    cfg = pipeline_config(config, _with_workspace(overrides, workspace), preset)
    _preflight(cfg)
    t0 = time.perf_counter()
    result, where = _run_pipeline(cfg, refresh)
    _print_summary(cfg, result, where, time.perf_counter() - t0)


@guard
def run(
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    refresh: list[str] | None = RefreshOpt,
    workspace: Path | None = WorkspaceOpt,
    preset: str | None = PresetOpt,
) -> None:
    """Run the end-to-end pipeline; completed stages with the same inputs and config are reused."""
    _run_and_summarise(config, set_, refresh, workspace, preset)


@guard
def demo(
    workspace: Path = typer.Option(Path("t2g-workspace"), "--workspace", "-w", help="Workspace folder."),
    set_: list[str] | None = SetOpt,
    refresh: list[str] | None = RefreshOpt,
    preset: str | None = PresetOpt,
) -> None:
    """The main job: the whole pipeline on the built-in demo data with the embedded defaults (the same as the Prefect
    UI form's and `t2g run`'s), then what was learnt."""
    _run_and_summarise(None, set_, refresh, workspace, preset)


def lineage(
    version: str = typer.Argument(..., help="Policy model version (number) or alias, e.g. 3 or champion."),
    model: str = typer.Option("text2grad-policy", help="Registered model name of the policy adapter."),
    workspace: Path = typer.Option(
        Path("t2g-workspace"), "--workspace", "-w", help="Workspace (for its default MLflow store)."
    ),
    tracking_uri: str | None = typer.Option(
        None, help="MLflow tracking URI (default: make up's server or the workspace DB)."
    ),
) -> None:
    """Walk back policy -> PPO run -> reward model -> RM data -> validated annotations -> feedback, from MLflow
    alone."""
    where = runtime.prepare_environment(workspace)
    try:
        chain = lineage_chain(model, version, tracking_uri or where["mlflow"])
    except LookupError as exc:
        fail(str(exc))
    for depth, node in chain:
        echo("  " * depth + node)


def _print_summary(cfg, result: dict, where: dict, seconds: float) -> None:
    for line in summary_lines(cfg, result, where, seconds):
        echo(line)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("demo")(demo)
    app.command("lineage")(lineage)
