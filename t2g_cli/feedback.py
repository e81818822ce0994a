"""``t2g feedback``: check and import feedback files."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import echo, guard, stage_context
from t2g_core.config import DataConfig
from t2g_core.config.stages import FeedbackSettings
from t2g_core.feedback import iter_feedback
from t2g_core.stages import feedback
from t2g_core.stages.refs import SourceRef

feedback_app = typer.Typer(
    help="Check and import feedback (Parquet, JSONL, CSV or a datasets folder).", no_args_is_help=True
)


@feedback_app.command("check")
@guard
def check(path: Path = typer.Argument(..., help="Feedback file or folder.")) -> None:
    """Validate a feedback file against the schema; prints one clear error naming file, row and column. The file is
    read in pieces: any size is checked in about the memory of one piece."""
    from collections import Counter

    counts: Counter = Counter()
    for piece in iter_feedback(path):
        counts.update(piece["task"])
    total = sum(counts.values())
    echo(f"{path}: {total} valid items ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})")


@feedback_app.command("import")
@guard
def import_(
    path: Path = typer.Argument(..., help="Feedback file or folder."),
    workspace: Path = typer.Option(Path("t2g-workspace"), help="Workspace folder."),
) -> None:
    """Validate feedback and store it as an immutable `feedback` artifact in the workspace; prints its path."""
    settings = FeedbackSettings(data=DataConfig(source=str(path.resolve())))
    source = SourceRef.of(settings.data)
    ref = feedback.materialise(
        source, settings, stage_context("feedback", workspace, {"source": source, "settings": settings})
    )
    echo(f"feedback artifact: {ref.path} ({ref.n_rows} rows, sha256 {ref.sha256[:12]})")


def register(app: typer.Typer) -> None:
    app.add_typer(feedback_app, name="feedback")
