"""Parquet artifact schemas (ARCHITECTURE §3), declared once and checked on every read and write.

A violation raises :class:`SchemaError` naming the file, the column and the first offending row, e.g.
``feedback.jsonl: row 12, column 'task': 'sumarization' is not one of summarization, code, qa``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

TASKS = ("summarization", "code", "qa")
STATUSES = ("ok", "parse_error", "api_error", "timeout", "sandbox_error", "refused")
LABELS = ("positive", "negative")
MATCHES = ("exact", "normalized", "fuzzy", "unmatched")
SPLITS = ("train", "validation", "test")


class SchemaError(ValueError):
    """An artifact breaks its schema. ``file``, ``column`` and ``row`` locate the first problem (row is 0-based)."""

    def __init__(self, file: str, message: str, column: str | None = None, row: int | None = None):
        self.file, self.column, self.row = file, column, row
        where = [file]
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"{', '.join(where)}: {message}")


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    nullable: bool = False
    non_empty: bool = False  # strings must not be empty or whitespace
    choices: tuple[str, ...] | None = None
    json: bool = False  # a JSON-encoded string


@dataclass(frozen=True)
class ArtifactSchema:
    name: str
    columns: tuple[Column, ...]
    unique: tuple[str, ...] = field(default_factory=tuple)  # column combination that must be unique

    @property
    def arrow(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in self.columns])

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


S, F, I, LS, LF = pa.string(), pa.float64(), pa.int64(), pa.list_(pa.string()), pa.list_(pa.float64())

FEEDBACK = ArtifactSchema(
    "feedback",
    (
        Column("id", S, non_empty=True),
        Column("task", S, choices=TASKS),
        Column("prompt", S, non_empty=True),
        Column("response", S),
        Column("critique", S, nullable=True),
        Column("reference", S, nullable=True),
        Column("tests", S, nullable=True),
        Column("entry_point", S, nullable=True),
        Column("meta", S, nullable=True, json=True),
    ),
    unique=("id",),
)

ANNOTATIONS = ArtifactSchema(
    "annotations",
    (
        Column("id", S, non_empty=True),
        Column("annotator", S, non_empty=True),
        Column("critique", S, nullable=True),
        Column("good_spans", LS),
        Column("poor_spans", LS),
        Column("reasoning", S, nullable=True),
        Column("status", S, choices=STATUSES),
        Column("error", S, nullable=True),
        Column("raw", S, nullable=True),
        Column("prompt_tokens", I),
        Column("completion_tokens", I),
        Column("latency_s", F),
    ),
    unique=("id", "annotator"),
)

SPANS = ArtifactSchema(
    "spans",
    (
        Column("id", S, non_empty=True),
        Column("span_index", I),
        Column("label", S, choices=LABELS),
        Column("text", S),
        Column("start", I, nullable=True),
        Column("end", I, nullable=True),
        Column("match", S, choices=MATCHES),
        Column("score", F),
    ),
    unique=("id", "span_index"),
)

RM_DATA = ArtifactSchema(
    "rm_data",
    (
        Column("id", S, non_empty=True),
        Column("split", S, choices=SPLITS),
        Column("rm_prompt", S, non_empty=True),
        Column("rm_target", S, non_empty=True),
    ),
    unique=("id",),
)

ROLLOUTS = ArtifactSchema(
    "rollouts",
    (
        Column("step", I),
        Column("id", S),
        Column("prompt", S),
        Column("response", S),
        Column("critique", S, nullable=True),
        Column("good_spans", LS),
        Column("poor_spans", LS),
        Column("token_rewards", LF),
        Column("reward", F),
        Column("kl", F),
    ),
    unique=("step", "id"),
)

SCHEMAS: dict[str, ArtifactSchema] = {s.name: s for s in (FEEDBACK, ANNOTATIONS, SPANS, RM_DATA, ROLLOUTS)}


def _is_missing(value: object) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # lists and arrays
        return False


def _check_value(col: Column, value: object) -> str | None:
    """Return a message when ``value`` breaks ``col``; None when it is fine."""
    if _is_missing(value):
        return None if col.nullable else "is empty (null) but the column is required"
    t = col.type
    if pa.types.is_string(t):
        if not isinstance(value, str):
            return f"expected text, got {type(value).__name__} {value!r:.40}"
        if col.non_empty and not value.strip():
            return "is an empty string"
        if col.choices is not None and value not in col.choices:
            return f"{value!r:.40} is not one of {', '.join(col.choices)}"
        if col.json:
            try:
                json.loads(value)
            except json.JSONDecodeError as exc:
                return f"is not valid JSON ({exc.msg})"
    elif pa.types.is_integer(t):
        if isinstance(value, bool) or not isinstance(value, (int,)) and not (hasattr(value, "is_integer") and value.is_integer()):
            return f"expected an integer, got {value!r:.40}"
    elif pa.types.is_floating(t):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                float(value)  # numpy scalars
            except (TypeError, ValueError):
                return f"expected a number, got {value!r:.40}"
    elif pa.types.is_list(t):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            return f"expected a list, got {type(value).__name__}"
        inner = Column(col.name, t.value_type)
        for item in value:
            msg = _check_value(inner, item)
            if msg:
                return f"list item {msg}"
    return None


def validate_frame(df: pd.DataFrame, schema: ArtifactSchema, file: str) -> pd.DataFrame:
    """Check ``df`` against ``schema``; return it with the schema's column order. Raises SchemaError."""
    missing = [c for c in schema.names if c not in df.columns]
    if missing:
        raise SchemaError(file, f"missing column(s) {', '.join(missing)}; expected {', '.join(schema.names)}", column=missing[0])
    for col in schema.columns:
        for row, value in enumerate(df[col.name].tolist()):
            msg = _check_value(col, value)
            if msg:
                raise SchemaError(file, msg, column=col.name, row=row)
    if schema.unique:
        dup = df.duplicated(subset=list(schema.unique), keep="first")
        if dup.any():
            row = int(dup.to_numpy().nonzero()[0][0])
            first = df[list(schema.unique)].iloc[row].tolist()
            raise SchemaError(file, f"duplicate {'/'.join(schema.unique)} {first!r}", column=schema.unique[0], row=row)
    return df[schema.names].reset_index(drop=True)


def to_arrow(df: pd.DataFrame, schema: ArtifactSchema) -> pa.Table:
    """Convert a validated frame to an Arrow table with exactly the declared types."""
    arrays = []
    for col in schema.columns:
        values = df[col.name].tolist()
        values = [None if _is_missing(v) else v for v in values]
        if pa.types.is_list(col.type):
            values = [None if v is None else list(v) for v in values]
        elif pa.types.is_integer(col.type):
            values = [None if v is None else int(v) for v in values]
        elif pa.types.is_floating(col.type):
            values = [None if v is None else float(v) for v in values]
        arrays.append(pa.array(values, type=col.type))
    return pa.Table.from_arrays(arrays, schema=schema.arrow)
