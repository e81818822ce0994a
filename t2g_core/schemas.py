"""Parquet artifact schemas (the contract table in docs/architecture.md), declared once, checked on read and write.

A violation raises :class:`SchemaError` naming the file, the column and the first offending row, e.g.
``feedback.jsonl: row 12, column 'task': 'sumarization' is not one of summarization, code, qa``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa

TASKS = ("summarization", "code", "qa")
STATUSES = ("ok", "parse_error", "api_error", "timeout", "sandbox_error", "refused", "missing_input")
LABELS = ("positive", "negative")
MATCHES = ("exact", "normalized", "fuzzy", "unmatched")
SPLITS = ("train", "validation", "test")


_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds a surrogate code point, or None. A Python string decoded from valid UTF-8 never holds
    one; JSON's ``\\ud800`` escapes (a UTF-16 string cut inside a character pair) do, and such text cannot be
    written as UTF-8, so Arrow, Parquet and SQLite refuse it."""
    found = _SURROGATE.search(text)
    return found.start() if found else None


def replace_surrogates(text: str) -> tuple[str, int]:
    """``text`` with every surrogate code point replaced by U+FFFD (one character for one: offsets stay), and how
    many there were."""
    return _SURROGATE.subn(REPLACEMENT, text)


def surrogate_in(value: Any, path: str = "") -> tuple[str, int, str] | None:
    """The first surrogate in a JSON-like value (strings, lists, dicts, keys too): ``(where, position, code)``,
    where ``where`` is a path such as ``meta.notes[2]``; None when there is none."""
    if isinstance(value, str):
        at = lone_surrogate(value)
        return None if at is None else (path, at, f"U+{ord(value[at]):04X}")
    items: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        items = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
        items += [(f"{path} (a key)", k) for k in value if isinstance(k, str)]
    elif isinstance(value, (list, tuple)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    for where, item in items:
        found = surrogate_in(item, where)
        if found:
            return found
    return None


class SchemaError(ValueError):
    """An artifact breaks its schema. ``file``, ``column`` and ``row`` locate the first problem (row is 0-based)."""

    def __init__(self, file: str, message: str, column: str | None = None, row: int | None = None):
        self.file, self.column, self.row, self.message = file, column, row, message
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
    volatile: bool = False  # a measurement of the run (a timing), not content: left out of the content hash
    item_nullable: bool = False  # a list column whose items may be null
    # a column added after artifacts were written: a frame without it reads with this value (a factory) in every row
    default: Callable[[], Any] | None = None


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

    @property
    def content(self) -> ArtifactSchema:
        """This schema without its volatile columns: what identifies an artifact's content."""
        return ArtifactSchema(self.name, tuple(c for c in self.columns if not c.volatile), self.unique)


STR, FLOAT, INT = pa.string(), pa.float64(), pa.int64()
STR_LIST, FLOAT_LIST, INT_LIST = pa.list_(STR), pa.list_(FLOAT), pa.list_(INT)

FEEDBACK = ArtifactSchema(
    "feedback",
    (
        Column("id", STR, non_empty=True),
        Column("task", STR, choices=TASKS),
        Column("prompt", STR, non_empty=True),
        Column("response", STR),
        Column("critique", STR, nullable=True),
        Column("reference", STR, nullable=True),
        Column("tests", STR, nullable=True),
        Column("entry_point", STR, nullable=True),
        Column("meta", STR, nullable=True, json=True),
    ),
    unique=("id",),
)

ANNOTATIONS = ArtifactSchema(
    "annotations",
    (
        Column("id", STR, non_empty=True),
        Column("annotator", STR, non_empty=True),
        Column("critique", STR, nullable=True),
        Column("good_spans", STR_LIST),
        Column("poor_spans", STR_LIST),
        Column("reasoning", STR, nullable=True),
        Column("status", STR, choices=STATUSES),
        Column("error", STR, nullable=True),
        Column("raw", STR, nullable=True),
        Column("prompt_tokens", INT),
        Column("completion_tokens", INT),
        Column("latency_s", FLOAT, volatile=True),  # wall time: changes with the machine, not the annotation
        # required content the response leaves out, and the char offset where each belonged (null: unknown, the end)
        Column("missing", STR_LIST, default=list),
        Column("missing_at", INT_LIST, item_nullable=True, default=list),
    ),
    unique=("id", "annotator"),
)

SPANS = ArtifactSchema(
    "spans",
    (
        Column("id", STR, non_empty=True),
        Column("span_index", INT),
        Column("label", STR, choices=LABELS),
        Column("text", STR),
        Column("start", INT, nullable=True),
        Column("end", INT, nullable=True),
        Column("match", STR, choices=MATCHES),
        Column("score", FLOAT),
    ),
    unique=("id", "span_index"),
)

RM_DATA = ArtifactSchema(
    "rm_data",
    (
        Column("id", STR, non_empty=True),
        Column("split", STR, choices=SPLITS),
        Column("rm_prompt", STR, non_empty=True),
        Column("rm_target", STR, non_empty=True),
    ),
    unique=("id",),
)

ROLLOUTS = ArtifactSchema(
    "rollouts",
    (
        Column("step", INT),
        Column("id", STR),
        Column("prompt", STR),
        Column("response", STR),
        Column("critique", STR, nullable=True),
        Column("good_spans", STR_LIST),
        Column("poor_spans", STR_LIST),
        Column("token_rewards", FLOAT_LIST),
        Column("reward", FLOAT),
        Column("kl", FLOAT),
        Column("status", STR, choices=STATUSES),  # the reward source's answer for this rollout (ok or why not)
        Column("error", STR, nullable=True),
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


def _check_string(col: Column, value: object) -> str | None:
    if not isinstance(value, str):
        return f"expected text, got {type(value).__name__}"
    if (at := lone_surrogate(value)) is not None:
        return f"holds a lone surrogate U+{ord(value[at]):04X} at character {at}: {NOT_UNICODE}"
    if col.non_empty and not value.strip():
        return "is an empty string"
    if col.choices is not None and value not in col.choices:
        return f"is not one of {', '.join(col.choices)}"
    if col.json:
        try:
            found = surrogate_in(json.loads(value, parse_constant=_refuse_constant))
        except json.JSONDecodeError as exc:
            return f"is not valid JSON ({exc.msg})"
        except RecursionError:
            return "is not valid JSON (nested too deeply)"
        except ValueError as exc:
            return str(exc)
        if found:
            return f"holds an escaped lone surrogate {found[2]} ({found[0] or 'the value'}): {NOT_UNICODE}"
    return None


NOT_UNICODE = (
    "not valid Unicode text (often a UTF-16 string cut inside a character pair); replace it, e.g. with U+FFFD, "
    "and load the file again"
)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"holds {name}, which is not a finite number (JSON has no such value)")


def _check_integer(col: Column, value: object) -> str | None:
    integral = (
        isinstance(value, int)
        or (isinstance(value, float) and value.is_integer())
        or hasattr(value, "dtype")
        and value.dtype.kind in "iu"
    )
    if isinstance(value, bool) or not integral:
        return f"expected an integer, got {type(value).__name__}"
    return None


def _check_float(col: Column, value: object) -> str | None:
    if isinstance(value, (bool, str, bytes)):
        return f"expected a number, got {type(value).__name__}"
    try:
        number = float(value)  # ints, floats and numpy scalars
    except (TypeError, ValueError):
        return f"expected a number, got {type(value).__name__}"
    if not math.isfinite(number):
        return f"expected a finite number, got {number}"
    return None


def _check_list(col: Column, value: object) -> str | None:
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        return f"expected a list, got {type(value).__name__}"
    inner = Column(col.name, col.type.value_type, nullable=col.item_nullable)
    for item in value:
        msg = _check_value(inner, item)
        if msg:
            return f"list item {msg}"
    return None


def _checker(t: pa.DataType):
    if pa.types.is_string(t):
        return _check_string
    if pa.types.is_integer(t):
        return _check_integer
    if pa.types.is_floating(t):
        return _check_float
    if pa.types.is_list(t):
        return _check_list
    raise TypeError(f"no checker for {t}")


def _check_value(col: Column, value: object) -> str | None:
    """Return a message when ``value`` breaks ``col``; None when it is fine."""
    if _is_missing(value):
        return None if col.nullable else "is empty (null) but the column is required"
    return _checker(col.type)(col, value)


def with_defaults(df: pd.DataFrame, schema: ArtifactSchema) -> pd.DataFrame:
    """``df`` with every column the schema gives a default filled where the frame has none: the whole column when
    absent, a row's empty (null) value when the column is required (rows from a producer that does not set it)."""
    fill = {}
    for c in schema.columns:
        if c.default is None:
            continue
        if c.name not in df.columns:
            fill[c.name] = [c.default() for _ in range(len(df))]
            continue
        values = df[c.name].tolist()
        if not c.nullable and any(_is_missing(v) for v in values):
            fill[c.name] = [c.default() if _is_missing(v) else v for v in values]
    return df.assign(**fill) if fill else df


def validate_frame(df: pd.DataFrame, schema: ArtifactSchema, file: str) -> pd.DataFrame:
    """Check ``df`` against ``schema``; return it with the schema's column order. A column the schema gives a default
    (one added after artifacts were written) reads with that value where the frame has none (:func:`with_defaults`).
    Raises SchemaError."""
    df = with_defaults(df, schema)
    missing = [c for c in schema.names if c not in df.columns]
    if missing:
        raise SchemaError(
            file, f"missing column(s) {', '.join(missing)}; expected {', '.join(schema.names)}", column=missing[0]
        )
    for col in schema.columns:
        for row, value in enumerate(df[col.name].tolist()):
            msg = _check_value(col, value)
            if msg:
                raise SchemaError(file, msg, column=col.name, row=row)
    if schema.unique:
        dup = df.duplicated(subset=list(schema.unique), keep="first")
        if dup.any():
            row = int(dup.to_numpy().nonzero()[0][0])
            keys = list(df[list(schema.unique)].itertuples(index=False))
            first = keys.index(keys[row])
            raise SchemaError(
                file, f"duplicate {'/'.join(schema.unique)}: the same as row {first}", schema.unique[0], row
            )
    return df[schema.names].reset_index(drop=True)


def _list_items(value: Any, item_type: pa.DataType) -> list:
    """A list cell as plain items; integer items read back from Parquet as floats (NaN for null) become ints again."""
    items = list(value)
    if pa.types.is_integer(item_type):
        return [None if _is_missing(v) else int(v) for v in items]
    return items


def to_arrow(df: pd.DataFrame, schema: ArtifactSchema) -> pa.Table:
    """Convert a validated frame to an Arrow table with exactly the declared types."""
    arrays = []
    for col in schema.columns:
        values = df[col.name].tolist()
        values = [None if _is_missing(v) else v for v in values]
        if pa.types.is_list(col.type):
            values = [None if v is None else _list_items(v, col.type.value_type) for v in values]
        elif pa.types.is_integer(col.type):
            values = [None if v is None else int(v) for v in values]
        elif pa.types.is_floating(col.type):
            values = [None if v is None else float(v) for v in values]
        arrays.append(pa.array(values, type=col.type))
    return pa.Table.from_arrays(arrays, schema=schema.arrow)
