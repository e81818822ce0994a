"""Offline review files: export a sample (HTML page, JSONL sheet, sample.json) and read verdicts back.

The JSONL sheet has one line per judgement; a reviewer fills ``agree`` with true/false (for a critique line:
acceptable or not) and leaves null what they skip::

    {"sample_key": "...", "id": "sum-00003", "kind": "span", "span_index": 1, "label": "negative", "text": "Oslo",
     "agree": null}
    {"sample_key": "...", "id": "sum-00003", "kind": "critique", "span_index": null, "label": null,
     "text": "The summary ...", "agree": null}

(one line each in the file).

``load_verdicts`` reads either that sheet or the JSON file the HTML page downloads.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from t2g_core.review.models import ItemVerdict, ReviewSample, ReviewVerdicts, SpanJudgement, VerdictError
from t2g_core.review.page import render_page
from t2g_core.store import write_text_atomic

SAMPLE_FILE, PAGE_FILE, SHEET_FILE = "sample.json", "review.html", "sheet.jsonl"


def sheet_lines(sample: ReviewSample) -> list[dict]:
    lines = []
    for it in sample.items:
        head = {"sample_key": sample.key, "id": it.id}
        for s in it.spans:
            lines.append(head | {"kind": "span", "span_index": s.span_index, "label": s.label, "text": s.text})
        if it.critique is not None:
            lines.append(head | {"kind": "critique", "span_index": None, "label": None, "text": it.critique})
    return [line | {"agree": None} for line in lines]


def export_review(sample: ReviewSample, out_dir: str | Path) -> dict[str, Path]:
    """Write ``sample.json``, ``review.html`` and ``sheet.jsonl`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"sample": out / SAMPLE_FILE, "page": out / PAGE_FILE, "sheet": out / SHEET_FILE}
    write_text_atomic(paths["page"], render_page(sample))
    write_text_atomic(paths["sheet"], "".join(json.dumps(line) + "\n" for line in sheet_lines(sample)))
    write_text_atomic(paths["sample"], sample.model_dump_json(indent=1))  # last: the one later runs read
    return paths


def load_sample(path: str | Path) -> ReviewSample:
    """A review sample from ``sample.json`` or the export folder holding it."""
    p = Path(path)
    p = p / SAMPLE_FILE if p.is_dir() else p
    try:
        return ReviewSample.model_validate_json(p.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise VerdictError(f"{p}: not a review sample: {exc}") from None


def _sheet_verdicts(path: Path, reviewer: str) -> ReviewVerdicts:
    items: dict[str, ItemVerdict] = {}
    keys = set()
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            if line["agree"] is None:
                continue
            if not isinstance(line["agree"], bool):
                raise TypeError(f"'agree' must be true, false or null, got {line['agree']!r}")
            keys.add(line.get("sample_key", ""))
            v = items.setdefault(line["id"], ItemVerdict(id=line["id"]))
            if line["kind"] == "span":
                v.spans.append(
                    SpanJudgement(span_index=line["span_index"], agree=line["agree"], text=line.get("text", ""))
                )
            elif line["kind"] == "critique":
                v.critique_acceptable = line["agree"]
            else:
                raise ValueError(f"'kind' must be span or critique, got {line['kind']!r}")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, ValidationError) as exc:
            raise VerdictError(f"{path}: line {n}: {type(exc).__name__}: {exc}") from None
    if len(keys) > 1:
        raise VerdictError(f"{path}: lines from several samples: {sorted(keys)}")
    return ReviewVerdicts(reviewer=reviewer, sample_key=keys.pop() if keys else "", items=list(items.values()))


def load_verdicts(path: str | Path, reviewer: str = "offline") -> ReviewVerdicts:
    """Verdicts from the page's JSON download or a filled JSONL sheet (``reviewer`` names the sheet's reviewer)."""
    p = Path(path)
    if p.suffix == ".jsonl":
        return _sheet_verdicts(p, reviewer)
    try:
        return ReviewVerdicts.model_validate_json(p.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise VerdictError(f"{p}: invalid verdicts: {exc}") from None
