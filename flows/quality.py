"""Alignment and validation: quoted spans -> character offsets -> token labels, then the quality gates."""

from __future__ import annotations

from prefect import flow

from flows.stages import is_ref, not_built, stage_task
from t2g_core.config import PipelineConfig
from tasks.caching import cached


@flow(name="align-and-validate")
def align_and_validate(config: PipelineConfig, data: dict, annotations: dict, forced: set[str] | None = None) -> dict:
    """Align the annotations' spans to the responses, then gate on their quality; returns spans and validation refs."""
    forced, root = forced or set(), config.workspace.root
    align, validate = stage_task("align", "align"), stage_task("validate", "validate")
    if align is None or not is_ref(annotations):
        return {"spans": not_built("align", "its task module is not written yet" if align is None else "no annotations")}
    spans = cached(align, root, refresh="align" in forced)(data["feedback"], annotations, data["models"], config.align, config.workspace)
    if validate is None:
        return {"spans": spans, "validation": not_built("validate")}
    report = cached(validate, root, refresh="validate" in forced)(data["feedback"], annotations, spans, config.validate_, config.workspace)
    return {"spans": spans, "validation": report}
