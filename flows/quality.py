"""Alignment and validation: quoted spans -> character offsets -> token labels, then review and quality gates."""

from __future__ import annotations

from prefect import flow

from flows.stages import is_ref, not_built, stage_task
from t2g_core.config import PipelineConfig
from tasks.caching import cached


@flow(name="align-and-validate")
def align_and_validate(config: PipelineConfig, data: dict, annotations: dict, forced: set[str] | None = None) -> dict:
    """Align the annotations' spans, review a sample, gate on quality (a failed gate fails the run with its report)."""
    forced, root = forced or set(), config.workspace.root
    align = stage_task("align", "align")
    if align is None or not is_ref(annotations):
        return {
            "spans": not_built("align", "its task module is not written yet" if align is None else "no annotations")
        }
    spans = cached(align, root, refresh="align" in forced)(
        data["feedback"], annotations, data["models"], config.align, config.workspace
    )
    return {"spans": spans, "validation": validate(config, data["feedback"], annotations, spans, "validate" in forced)}


def validate(config: PipelineConfig, feedback: dict, annotations: dict, spans: dict, refresh: bool) -> dict:
    """Review sample -> verdicts (ground truth, the Prefect UI form, or none) -> gates and report."""
    from tasks import validate as v

    cfg, ws, root = config.validate_, config.workspace, config.workspace.root
    sample = verdicts = None
    if cfg.review != "none":
        sample = cached(v.draw_review_sample, root, refresh=refresh)(annotations, spans, feedback, cfg, ws)
    if cfg.review == "auto":
        verdicts = cached(v.auto_review, root, refresh=refresh)(sample, annotations, spans, feedback)
    elif cfg.review == "ui":
        verdicts = v.ui_review(sample, cfg.model_dump(mode="json"))
    return cached(v.validation_report, root, refresh=refresh)(annotations, spans, feedback, sample, verdicts, cfg, ws)
