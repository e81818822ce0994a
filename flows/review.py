"""The human review in the Prefect UI: the flow pauses on a form until a reviewer submits verdicts on the sample.

Prefect pauses flow runs, not task runs, so this runs in a flow body: ``align_and_validate`` calls
:func:`ui_review` when ``validate.review=ui``, and ``t2g validate --review ui`` wraps it in a flow of its own. The
sample is published as a markdown artifact (good spans 🟩, poor spans 🟥); the form carries the same field
definitions as the core verdict model.
"""

from __future__ import annotations

from prefect.input import RunInput
from pydantic import create_model

from t2g_core.config import ValidateConfig
from t2g_core.review import load_sample
from t2g_core.review.models import VERDICT_FIELDS, ReviewSample, ReviewVerdicts, VerdictError, check_verdicts
from t2g_core.stages.refs import ReviewSampleRef

# The Prefect form: the same field definitions as the core verdict model, so the server validates resume input
# with exactly the rules `t2g review import` applies.
ReviewInput = create_model(
    "ReviewInput",
    __base__=RunInput,
    __doc__="Verdicts on the review sample (see the `validation-review-sample` artifact).",
    **{name: (f.annotation, f) for name, f in VERDICT_FIELDS.items()},
)
PAUSE_KEY = "span-review"
SAMPLE_ARTIFACT = "validation-review-sample"


def sample_markdown(sample: ReviewSample) -> str:
    """The sample as markdown: good spans as 🟩[k]**text**, poor spans as 🟥[k]**text**, then the critique."""
    parts = [
        f"# Span review, sample `{sample.key}`\n",
        f"{len(sample.items)} items, {sample.n_judgements} judgements. "
        "Resume the run with one verdict per item: for each span `agree` true/false, and `critique_acceptable`.\n",
    ]
    for it in sample.items:
        text, located = it.response, sorted((s for s in it.spans if s.start is not None), key=lambda s: -s.start)
        for s in located:  # right to left so earlier offsets stay valid
            mark = "🟩" if s.label == "positive" else "🟥"
            text = f"{text[: s.start]}{mark}[{s.span_index}]**{text[s.start : s.end]}**{text[s.end :]}"
        unmatched = [f"[{s.span_index}] {s.label} “{s.text}” (not found)" for s in it.spans if s.start is None]
        parts.append(f"## {it.id} ({it.stratum})\n\n**Prompt:** {it.prompt}\n\n**Response:** {text}\n")
        parts += [f"- {u}\n" for u in unmatched]
        parts.append(f"**Critique:** {it.critique if it.critique is not None else '(none)'}\n")
    return "\n".join(parts)


def _initial_items(sample: ReviewSample) -> list[dict]:
    return [
        {
            "id": it.id,
            "spans": [{"span_index": s.span_index, "agree": True, "text": s.text} for s in it.spans],
            "critique_acceptable": True if it.critique is not None else None,
            "comment": "",
        }
        for it in sample.items
    ]


def ui_review(
    sample: ReviewSampleRef | dict, cfg: ValidateConfig | dict, attempts: int = 3, poll_interval_s: float = 10.0
) -> dict:
    """Publish the sample as a markdown artifact and pause the flow until a reviewer submits verdicts.

    Call it from a flow body (Prefect pauses flow runs, not task runs). The server rejects input that breaks the
    verdict schema; verdicts that name items or spans outside the sample re-open the form with the error shown,
    up to ``attempts`` times (pause keys ``span-review-1``, ``-2``, ...: Prefect skips a pause whose key already
    fired). Returns the verdicts as a dict.
    """
    from prefect.artifacts import create_markdown_artifact
    from prefect.flow_runs import pause_flow_run

    s = load_sample(sample.sample) if isinstance(sample, ReviewSampleRef) else ReviewSample.model_validate(sample)
    c = cfg if isinstance(cfg, ValidateConfig) else ValidateConfig.model_validate(cfg)
    create_markdown_artifact(key=SAMPLE_ARTIFACT, markdown=sample_markdown(s), description=f"review sample {s.key}")
    note = f"Review the sample in the `{SAMPLE_ARTIFACT}` artifact ({s.n_judgements} judgements)."
    for attempt in range(1, attempts + 1):
        form = ReviewInput.with_initial_data(
            description=note, sample_key=s.key, items=_initial_items(s)
        )  # reviewer stays required
        answer = pause_flow_run(
            wait_for_input=form, timeout=c.review_timeout_s, key=f"{PAUSE_KEY}-{attempt}", poll_interval=poll_interval_s
        )
        verdicts = ReviewVerdicts.model_validate(answer.model_dump())
        try:
            check_verdicts(s, verdicts, "review form")
            return verdicts.model_dump(mode="json")
        except VerdictError as exc:
            note = f"Please correct: {exc}"
    raise VerdictError(f"review form: no valid verdicts after {attempts} attempts ({note})")
