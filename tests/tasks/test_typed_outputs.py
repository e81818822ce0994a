"""A stage group reused on a Retry hands back its stored JSON result; the pipeline's outputs are typed again before
they are linked to the MLflow parent run and summarised, the optional stages' too (before, the warm-up's and the
policy samples' stayed plain dicts and were left out of the parent run's lineage)."""

from __future__ import annotations

from t2g_core.stages.refs import ArtifactRef, ModelsRef, PolicySamplesRef
from t2g_core.stages.registry import typed_outputs


def _artifact(name: str) -> ArtifactRef:
    return ArtifactRef(path=f"/ws/artifacts/{name}", sha256="0" * 64, n_rows=4, schema=name, key="k")


def test_stored_results_of_every_stage_come_back_as_their_reference_types():
    samples = PolicySamplesRef(feedback=_artifact("feedback"), annotations=_artifact("annotations"))
    warmed = ModelsRef(base="/b", policy="/w", base_digest="1", policy_digest="2")
    stored = {
        name: ref.model_dump(mode="json", by_alias=True)
        for name, ref in (("policy_samples", samples), ("warmup", warmed))
    }
    typed = typed_outputs({**stored, "feedback": _artifact("feedback"), "align": None})
    assert typed["policy_samples"] == samples and typed["warmup"] == warmed
    assert typed["feedback"] == _artifact("feedback") and typed["align"] is None
