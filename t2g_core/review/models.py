"""The review sample and the verdict format shared by every review path.

One verdict format for the Prefect UI form, the offline HTML page, the JSONL sheet and the programmatic reviewer:
:class:`ReviewVerdicts`. The Prefect ``RunInput`` in ``tasks/validate.py`` is built from ``VERDICT_FIELDS`` (the same
pydantic field definitions), so both paths validate input identically.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ReviewSpan(BaseModel):
    """One span of a sampled item as the reviewer sees it; ``start``/``end`` are null when the quote was unmatched."""

    model_config = ConfigDict(frozen=True)

    span_index: int = Field(ge=0, description="Index of the span within its item (spans artifact `span_index`).")
    label: Literal["positive", "negative"] = Field(description="positive = good span, negative = poor span.")
    text: str = Field(description="The quoted span text.")
    start: int | None = Field(None, description="Character offset into the response (half-open), null when unmatched.")
    end: int | None = Field(None, description="End character offset (exclusive), null when unmatched.")
    match: str = Field("exact", description="How the quote was located: exact, normalized, fuzzy or unmatched.")


class ReviewItem(BaseModel):
    """One sampled item: what the reviewer needs to judge its spans and critique."""

    model_config = ConfigDict(frozen=True)

    id: str
    task: str
    annotator: str
    stratum: str = Field(description="task/annotator/label stratum the item was drawn from.")
    prompt: str
    response: str
    critique: str | None = None
    spans: list[ReviewSpan] = Field(default_factory=list)


class ReviewSample(BaseModel):
    """A reproducible review sample: the same annotations, size and seed give the same ``key`` and items."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="Content hash of the sample (seed and item ids); verdicts carry it back.")
    seed: int
    items: list[ReviewItem]

    def item(self, item_id: str) -> ReviewItem:
        for it in self.items:
            if it.id == item_id:
                return it
        raise KeyError(item_id)

    @property
    def n_judgements(self) -> int:
        """Judgements the sample asks for: one per span plus one per critique."""
        return sum(len(it.spans) + (it.critique is not None) for it in self.items)


class SpanJudgement(BaseModel):
    span_index: int = Field(ge=0, description="Which span of the item (see the review page or artifact).")
    agree: bool = Field(description="True = the span is correctly marked good/poor; False = it is not.")
    text: str = Field("", description="The span text, shown for convenience; ignored when scoring.")


class ItemVerdict(BaseModel):
    id: str = Field(min_length=1, description="Item id from the review sample.")
    spans: list[SpanJudgement] = Field(default_factory=list, description="One judgement per span of the item.")
    critique_acceptable: bool | None = Field(
        None, description="Is the critique acceptable? Null when there is no critique."
    )
    comment: str = Field("", description="Free-text note from the reviewer.")


class ReviewVerdicts(BaseModel):
    """A reviewer's verdicts on a review sample: the file the HTML page downloads and `t2g review import` reads."""

    reviewer: str = Field(
        min_length=1, description="Who reviewed (name or 'ground-truth' for the programmatic reviewer)."
    )
    sample_key: str = Field("", description="Key of the review sample these verdicts belong to.")
    items: list[ItemVerdict] = Field(description="One verdict per reviewed item.")


VERDICT_FIELDS = ReviewVerdicts.model_fields


class VerdictError(ValueError):
    """Verdicts that do not fit their sample (unknown item or span, wrong sample key); the message names the item."""


def check_verdicts(sample: ReviewSample, verdicts: ReviewVerdicts, source: str = "verdicts") -> None:
    """Raise VerdictError when verdicts name items or spans that are not in ``sample``."""
    if verdicts.sample_key and verdicts.sample_key != sample.key:
        raise VerdictError(
            f"{source}: sample_key {verdicts.sample_key!r} does not match the review sample {sample.key!r}"
        )
    seen: set[str] = set()
    for n, v in enumerate(verdicts.items):
        try:
            item = sample.item(v.id)
        except KeyError:
            raise VerdictError(f"{source}: item {n} ({v.id!r}) is not in the review sample") from None
        if v.id in seen:
            raise VerdictError(f"{source}: item {n} ({v.id!r}) is judged twice")
        seen.add(v.id)
        known = {s.span_index for s in item.spans}
        for j in v.spans:
            if j.span_index not in known:
                raise VerdictError(f"{source}: item {v.id!r} has no span {j.span_index} (spans: {sorted(known)})")
